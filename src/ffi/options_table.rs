//! The C API's option structs (`fulmen_*_options`), written once:
//! `tools/codegen/option_structs.rs` generates from this table, for each
//! area, `src/ffi/<area>/gen_options.rs` (the `#[repr(C)]` structs cbindgen
//! copies into the headers, their `*_default` functions and their
//! conversions to and from the core's options) and the Go structs of
//! `bindings/go/options_gen.go` with their defaults and conversions. The
//! C++ option types derive from the C structs and add only constructors.
//! Adding a struct or a field is an entry here, then `make header`;
//! `tests/option_structs_drift.rs` fails when a committed copy drifts.

/// The C type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CType {
    /// `double`.
    F64,
    /// `int64_t`.
    I64,
    /// `int32_t`, holding a C enum's value.
    I32,
    /// `uint64_t`.
    U64,
    /// `bool`.
    Bool,
}

impl CType {
    /// The Rust type.
    pub fn rust(self) -> &'static str {
        match self {
            CType::F64 => "f64",
            CType::I64 => "i64",
            CType::I32 => "i32",
            CType::U64 => "u64",
            CType::Bool => "bool",
        }
    }

    /// The Go type a binding's field has unless the table names another.
    pub fn go(self) -> &'static str {
        match self {
            CType::F64 => "float64",
            CType::I64 => "int64",
            CType::I32 => "int32",
            CType::U64 => "uint64",
            CType::Bool => "bool",
        }
    }

    /// cgo's name of the C type.
    pub fn cgo(self) -> &'static str {
        match self {
            CType::F64 => "C.double",
            CType::I64 => "C.int64_t",
            CType::I32 => "C.int32_t",
            CType::U64 => "C.uint64_t",
            CType::Bool => "C.bool",
        }
    }
}

/// How a C field maps to the core's options struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreMap {
    /// The same value at this path of the core struct: a field (`lr`) or
    /// an element of a tuple field (`betas.0`).
    Same(&'static str),
    /// The core field `field` is `to_core`, an expression of the C struct
    /// `o`; the C field is `to_c`, an expression of the core struct `d`.
    Convert { field: &'static str, to_core: &'static str, to_c: &'static str },
    /// As `Convert`, with `to_core` a `crate::error::Result` (a value the
    /// core refuses with its error, e.g. an enum's number checked): the C
    /// struct then converts with `TryFrom`.
    TryConvert { field: &'static str, to_core: &'static str, to_c: &'static str },
}

/// One field of an option struct.
#[derive(Debug, Clone, Copy)]
pub struct OptionField {
    /// The C name (also the Rust name).
    pub name: &'static str,
    /// The C type.
    pub ty: CType,
    /// The doc comment, line by line, as the header shows it.
    pub doc: &'static [&'static str],
    /// The Go field's name.
    pub go: &'static str,
    /// The Go field's type when it is not `ty`'s (a Go enum type).
    pub go_type: Option<&'static str>,
    /// The Go field's doc comment, line by line.
    pub go_doc: &'static [&'static str],
    /// Where the value lives in the core's options.
    pub core: CoreMap,
}

impl OptionField {
    /// The field at `path` of the core struct (`betas.0`) rather than at
    /// its own name.
    pub const fn at(self, path: &'static str) -> Self {
        OptionField { core: CoreMap::Same(path), ..self }
    }

    /// The field converted to and from the core field `field` (see
    /// [`CoreMap::Convert`]).
    pub const fn convert(self, field: &'static str, to_core: &'static str, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::Convert { field, to_core, to_c }, ..self }
    }

    /// The field converted to the core field `field` by a check that may
    /// refuse it (see [`CoreMap::TryConvert`]).
    pub const fn try_convert(self, field: &'static str, to_core: &'static str, to_c: &'static str) -> Self {
        OptionField { core: CoreMap::TryConvert { field, to_core, to_c }, ..self }
    }

    /// The field of Go type `go_type` (a Go enum type over `ty`).
    pub const fn go_as(self, go_type: &'static str) -> Self {
        OptionField { go_type: Some(go_type), ..self }
    }
}

/// A field copied as is to and from the core field of the same name.
pub const fn field(
    name: &'static str,
    ty: CType,
    doc: &'static [&'static str],
    go: &'static str,
    go_doc: &'static [&'static str],
) -> OptionField {
    OptionField { name, ty, doc, go, go_type: None, go_doc, core: CoreMap::Same(name) }
}

/// A parameter of a `*_default` function.
#[derive(Debug, Clone, Copy)]
pub struct DefaultParam {
    /// The C name.
    pub name: &'static str,
    /// The C type.
    pub ty: CType,
    /// The Go name.
    pub go: &'static str,
}

/// A `*_default` function: the C struct of some core options.
#[derive(Debug, Clone, Copy)]
pub struct DefaultFn {
    /// The C function.
    pub name: &'static str,
    /// Its doc comment, line by line.
    pub doc: &'static [&'static str],
    /// Its parameters, which `core` reads.
    pub params: &'static [DefaultParam],
    /// The core options it returns, a Rust expression.
    pub core: &'static str,
    /// The Go function.
    pub go: &'static str,
    /// The Go function's doc comment, line by line.
    pub go_doc: &'static [&'static str],
}

/// One option struct of the C API.
#[derive(Debug, Clone, Copy)]
pub struct OptionStruct {
    /// The C name, `fulmen_<what>_options`.
    pub name: &'static str,
    /// The area (the folder under `src/ffi/` and the header) it belongs to.
    pub area: &'static str,
    /// The doc comment, line by line.
    pub doc: &'static [&'static str],
    /// The core's options type it converts to and from, by path.
    pub core: &'static str,
    /// Other paths the conversions name (enums of the core).
    pub uses: &'static [&'static str],
    /// The fields, in C order (the ABI: never reordered).
    pub fields: &'static [OptionField],
    /// Its `*_default` functions.
    pub defaults: &'static [DefaultFn],
    /// The Go struct's name.
    pub go: &'static str,
    /// The Go struct's doc comment, line by line.
    pub go_doc: &'static [&'static str],
}

impl OptionStruct {
    /// Whether converting the C struct to the core's options can fail.
    pub fn fallible(&self) -> bool {
        self.fields.iter().any(|f| matches!(f.core, CoreMap::TryConvert { .. }))
    }
}

// The field types by their short names, for the table below.
use CType::{Bool, F64, I32, I64, U64};

/// Every option struct of the C API, grouped by area.
#[rustfmt::skip]
pub const OPTION_STRUCTS: &[OptionStruct] = &[
    OptionStruct {
        name: "fulmen_sgd_options",
        area: "optim",
        doc: &["SGD options (`torch.optim.SGD`); defaults from `fulmen_sgd_options_default`."],
        core: "crate::optim::SgdOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("momentum", F64, &["Momentum factor (default 0)."], "Momentum", &["Momentum is the momentum factor."]),
            field("dampening", F64, &["Dampening of the momentum (default 0)."], "Dampening", &["Dampening is the dampening of the momentum."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("nesterov", Bool, &["Nesterov momentum (default false)."], "Nesterov", &["Nesterov enables Nesterov momentum."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_sgd_options_default",
                doc: &["torch's SGD defaults."],
                params: &[],
                core: "SgdOptions::default()",
                go: "DefaultSGDOptions",
                go_doc: &["DefaultSGDOptions are torch's SGD defaults (fulmen_sgd_options_default)."],
            },
        ],
        go: "SGDOptions",
        go_doc: &["SGDOptions are torch.optim.SGD's options (fulmen_sgd_options)."],
    },
    OptionStruct {
        name: "fulmen_adam_options",
        area: "optim",
        doc: &["Adam / AdamW options; defaults from `fulmen_adam_options_default` or", "`fulmen_adamw_options_default` (weight decay 1e-2)."],
        core: "crate::optim::AdamOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 is the first-moment decay."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 is the second-moment decay."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2 for Adam, decoupled for AdamW."], "WeightDecay", &["WeightDecay is L2 for Adam, decoupled for AdamW."]),
            field("amsgrad", Bool, &["AMSGrad variant (default false)."], "AMSGrad", &["AMSGrad enables the AMSGrad variant."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adam_options_default",
                doc: &["torch's Adam defaults."],
                params: &[],
                core: "AdamOptions::default()",
                go: "DefaultAdamOptions",
                go_doc: &["DefaultAdamOptions are torch's Adam defaults."],
            },
            DefaultFn {
                name: "fulmen_adamw_options_default",
                doc: &["torch's AdamW defaults (weight decay 1e-2)."],
                params: &[],
                core: "AdamOptions::adamw()",
                go: "DefaultAdamWOptions",
                go_doc: &["DefaultAdamWOptions are torch's AdamW defaults (weight decay 1e-2)."],
            },
        ],
        go: "AdamOptions",
        go_doc: &["AdamOptions are the options of Adam and AdamW (fulmen_adam_options)."],
    },
    OptionStruct {
        name: "fulmen_rmsprop_options",
        area: "optim",
        doc: &["RMSprop options; defaults from `fulmen_rmsprop_options_default`."],
        core: "crate::optim::RmsPropOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-2)."], "LR", &["LR is the learning rate."]),
            field("alpha", F64, &["Smoothing constant (default 0.99)."], "Alpha", &["Alpha is the smoothing constant."]),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("momentum", F64, &["Momentum factor (default 0)."], "Momentum", &["Momentum is the momentum factor."]),
            field("centered", Bool, &["Centered variant (default false)."], "Centered", &["Centered enables the centered variant."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_rmsprop_options_default",
                doc: &["torch's RMSprop defaults."],
                params: &[],
                core: "RmsPropOptions::default()",
                go: "DefaultRMSpropOptions",
                go_doc: &["DefaultRMSpropOptions are torch's RMSprop defaults."],
            },
        ],
        go: "RMSpropOptions",
        go_doc: &["RMSpropOptions are torch.optim.RMSprop's options (fulmen_rmsprop_options)."],
    },
    OptionStruct {
        name: "fulmen_adagrad_options",
        area: "optim",
        doc: &["Adagrad options; defaults from `fulmen_adagrad_options_default`."],
        core: "crate::optim::AdagradOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-2)."], "LR", &["LR is the learning rate."]),
            field("lr_decay", F64, &["Learning-rate decay: step t uses `lr / (1 + (t - 1) * lr_decay)`", "(default 0)."], "LRDecay", &["LRDecay decays the learning rate: step t uses LR / (1 + (t-1) LRDecay)."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("initial_accumulator_value", F64, &["Starting value of the sum of squared gradients (default 0)."], "InitialAccumulatorValue", &["InitialAccumulatorValue starts the sum of squared gradients."]),
            field("eps", F64, &["Denominator term (default 1e-10)."], "Eps", &["Eps is the denominator term."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adagrad_options_default",
                doc: &["torch's Adagrad defaults."],
                params: &[],
                core: "AdagradOptions::default()",
                go: "DefaultAdagradOptions",
                go_doc: &["DefaultAdagradOptions are torch's Adagrad defaults."],
            },
        ],
        go: "AdagradOptions",
        go_doc: &["AdagradOptions are torch.optim.Adagrad's options."],
    },
    OptionStruct {
        name: "fulmen_adamax_options",
        area: "optim",
        doc: &["Adamax options; defaults from `fulmen_adamax_options_default`."],
        core: "crate::optim::AdamaxOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 2e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the gradient average."]).at("betas.0"),
            field("beta2", F64, &["Decay of the infinity norm (default 0.999)."], "Beta2", &["Beta2 decays the infinity norm."]).at("betas.1"),
            field("eps", F64, &["Term added to the norm (default 1e-8)."], "Eps", &["Eps is added to the norm."]),
            field("weight_decay", F64, &["L2 penalty (default 0)."], "WeightDecay", &["WeightDecay is the L2 penalty."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_adamax_options_default",
                doc: &["torch's Adamax defaults."],
                params: &[],
                core: "AdamaxOptions::default()",
                go: "DefaultAdamaxOptions",
                go_doc: &["DefaultAdamaxOptions are torch's Adamax defaults."],
            },
        ],
        go: "AdamaxOptions",
        go_doc: &["AdamaxOptions are torch.optim.Adamax's options."],
    },
    OptionStruct {
        name: "fulmen_nadam_options",
        area: "optim",
        doc: &["NAdam options; defaults from `fulmen_nadam_options_default`."],
        core: "crate::optim::NAdamOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 2e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the running average of the gradient."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 decays the running average of its square."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2, or decoupled with `decoupled_weight_decay`", "(default 0)."], "WeightDecay", &["WeightDecay is L2, or decoupled with DecoupledWeightDecay."]),
            field("momentum_decay", F64, &["Momentum decay of the momentum schedule (default 4e-3)."], "MomentumDecay", &["MomentumDecay is the decay of the momentum schedule."]),
            field("decoupled_weight_decay", Bool, &["Decoupled weight decay, as NAdamW (default false)."], "DecoupledWeightDecay", &["DecoupledWeightDecay makes it NAdamW."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_nadam_options_default",
                doc: &["torch's NAdam defaults."],
                params: &[],
                core: "NAdamOptions::default()",
                go: "DefaultNAdamOptions",
                go_doc: &["DefaultNAdamOptions are torch's NAdam defaults."],
            },
        ],
        go: "NAdamOptions",
        go_doc: &["NAdamOptions are torch.optim.NAdam's options."],
    },
    OptionStruct {
        name: "fulmen_radam_options",
        area: "optim",
        doc: &["RAdam options; defaults from `fulmen_radam_options_default`."],
        core: "crate::optim::RAdamOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate (default 1e-3)."], "LR", &["LR is the learning rate."]),
            field("beta1", F64, &["First-moment decay (default 0.9)."], "Beta1", &["Beta1 decays the running average of the gradient."]).at("betas.0"),
            field("beta2", F64, &["Second-moment decay (default 0.999)."], "Beta2", &["Beta2 decays the running average of its square."]).at("betas.1"),
            field("eps", F64, &["Denominator term (default 1e-8)."], "Eps", &["Eps is the denominator term."]),
            field("weight_decay", F64, &["Weight decay: L2, or decoupled with `decoupled_weight_decay`", "(default 0)."], "WeightDecay", &["WeightDecay is L2, or decoupled with DecoupledWeightDecay."]),
            field("decoupled_weight_decay", Bool, &["Decoupled weight decay, as RAdamW (default false)."], "DecoupledWeightDecay", &["DecoupledWeightDecay makes it RAdamW."]),
            field("maximize", Bool, &["Maximize instead of minimize (default false)."], "Maximize", &["Maximize maximizes instead of minimizing."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_radam_options_default",
                doc: &["torch's RAdam defaults."],
                params: &[],
                core: "RAdamOptions::default()",
                go: "DefaultRAdamOptions",
                go_doc: &["DefaultRAdamOptions are torch's RAdam defaults."],
            },
        ],
        go: "RAdamOptions",
        go_doc: &["RAdamOptions are torch.optim.RAdam's options."],
    },
    OptionStruct {
        name: "fulmen_lbfgs_options",
        area: "optim",
        doc: &["LBFGS options; defaults from `fulmen_lbfgs_options_default`."],
        core: "crate::optim::LbfgsOptions",
        uses: &[],
        fields: &[
            field("lr", F64, &["Learning rate: the step length (the first iteration's scaled by", "`min(1, 1 / |g|_1)`; default 1)."], "LR", &["LR is the step length after the first iteration."]),
            field("max_iter", I64, &["Iterations per step (default 20; at least 1)."], "MaxIter", &["MaxIter is the number of iterations per step (at least 1)."]),
            field("max_eval", I64, &["Loss evaluations per step; 0 = torch's default, `max_iter * 5 / 4`."], "MaxEval", &["MaxEval is the number of loss evaluations per step; 0 is torch's", "default, MaxIter * 5 / 4."]).convert("max_eval", "(o.max_eval != 0).then_some(o.max_eval)", "d.max_eval.unwrap_or(0)"),
            field("tolerance_grad", F64, &["Stop when no gradient entry exceeds this in magnitude (default 1e-7)."], "ToleranceGrad", &["ToleranceGrad stops a step when no gradient entry exceeds it."]),
            field("tolerance_change", F64, &["Stop when the loss or the step changes less than this (default 1e-9)."], "ToleranceChange", &["ToleranceChange stops a step when the loss or the step changes less."]),
            field("history_size", I64, &["Update pairs kept (default 100; 1 to 1048576)."], "HistorySize", &["HistorySize is the number of update pairs kept (1 to 1048576)."]),
            field("strong_wolfe", Bool, &["The strong-Wolfe line search (torch's `line_search_fn =", "\"strong_wolfe\"`) instead of a fixed step (default false)."], "StrongWolfe", &["StrongWolfe uses the strong-Wolfe line search (torch's", "line_search_fn=\"strong_wolfe\") instead of a fixed step."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_lbfgs_options_default",
                doc: &["torch's LBFGS defaults."],
                params: &[],
                core: "LbfgsOptions::default()",
                go: "DefaultLBFGSOptions",
                go_doc: &["DefaultLBFGSOptions are torch's LBFGS defaults."],
            },
        ],
        go: "LBFGSOptions",
        go_doc: &["LBFGSOptions are torch.optim.LBFGS's options."],
    },
    OptionStruct {
        name: "fulmen_one_cycle_options",
        area: "schedulers",
        doc: &["Options of `OneCycleLR`; defaults from `fulmen_one_cycle_options_default`."],
        core: "crate::optim::OneCycleOptions",
        uses: &["crate::optim::AnnealStrategy"],
        fields: &[
            field("max_lr", F64, &["Peak learning rate."], "MaxLR", &["MaxLR is the peak learning rate."]),
            field("total_steps", I64, &["Steps in the cycle."], "TotalSteps", &["TotalSteps is the number of steps in the cycle."]),
            field("pct_start", F64, &["Fraction of the cycle spent increasing the lr (default 0.3)."], "PctStart", &["PctStart is the fraction of the cycle spent increasing the lr."]),
            field("linear_anneal", Bool, &["Cosine (false, default) or linear (true) annealing."], "LinearAnneal", &["LinearAnneal anneals linearly instead of by cosine."]).convert("anneal_strategy", "if o.linear_anneal { AnnealStrategy::Linear } else { AnnealStrategy::Cos }", "d.anneal_strategy == AnnealStrategy::Linear"),
            field("cycle_momentum", Bool, &["Cycle momentum / beta1 inversely to the lr (default true)."], "CycleMomentum", &["CycleMomentum cycles momentum / beta1 inversely to the lr."]),
            field("base_momentum", F64, &["Lower momentum bound (default 0.85)."], "BaseMomentum", &["BaseMomentum is the lower momentum bound."]),
            field("max_momentum", F64, &["Upper momentum bound (default 0.95)."], "MaxMomentum", &["MaxMomentum is the upper momentum bound."]),
            field("div_factor", F64, &["initial lr = max_lr / div_factor (default 25)."], "DivFactor", &["DivFactor: initial lr = MaxLR / DivFactor."]),
            field("final_div_factor", F64, &["min lr = initial lr / final_div_factor (default 1e4)."], "FinalDivFactor", &["FinalDivFactor: min lr = initial lr / FinalDivFactor."]),
            field("three_phase", Bool, &["Three-phase schedule (default false)."], "ThreePhase", &["ThreePhase uses the three-phase schedule."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_one_cycle_options_default",
                doc: &["torch's OneCycleLR defaults for a peak lr and a cycle length."],
                params: &[DefaultParam { name: "max_lr", ty: F64, go: "maxLR" }, DefaultParam { name: "total_steps", ty: I64, go: "totalSteps" }],
                core: "OneCycleOptions::new(max_lr, total_steps)",
                go: "DefaultOneCycleOptions",
                go_doc: &["DefaultOneCycleOptions are torch's OneCycleLR defaults for a peak lr and", "a cycle length."],
            },
        ],
        go: "OneCycleOptions",
        go_doc: &["OneCycleOptions are the options of OneCycleLR (fulmen_one_cycle_options)."],
    },
    OptionStruct {
        name: "fulmen_plateau_options",
        area: "schedulers",
        doc: &["Options of `ReduceLROnPlateau`; defaults from", "`fulmen_plateau_options_default`."],
        core: "crate::optim::PlateauOptions",
        uses: &["crate::optim::PlateauMode", "crate::optim::ThresholdMode"],
        fields: &[
            field("mode_max", Bool, &["Higher metric is better (false: lower is better, the default)."], "ModeMax", &["ModeMax: a higher metric is better (false: lower is better)."]).convert("mode", "if o.mode_max { PlateauMode::Max } else { PlateauMode::Min }", "d.mode == PlateauMode::Max"),
            field("factor", F64, &["Factor applied to the lr on a plateau (default 0.1)."], "Factor", &["Factor is applied to the lr on a plateau."]),
            field("patience", U64, &["Bad steps tolerated before reducing (default 10)."], "Patience", &["Patience is the number of bad steps tolerated before reducing."]),
            field("threshold", F64, &["Threshold of a significant improvement (default 1e-4)."], "Threshold", &["Threshold is the threshold of a significant improvement."]),
            field("threshold_abs", Bool, &["Absolute (true) or relative (false, default) threshold."], "ThresholdAbs", &["ThresholdAbs makes the threshold absolute (false: relative)."]).convert("threshold_mode", "if o.threshold_abs { ThresholdMode::Abs } else { ThresholdMode::Rel }", "d.threshold_mode == ThresholdMode::Abs"),
            field("cooldown", U64, &["Steps to wait after a reduction (default 0)."], "Cooldown", &["Cooldown is the number of steps to wait after a reduction."]),
            field("min_lr", F64, &["Lower bound of the lr (default 0)."], "MinLR", &["MinLR is the lower bound of the lr."]),
            field("eps", F64, &["Smaller reductions are skipped (default 1e-8)."], "Eps", &["Eps: smaller reductions are skipped."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_plateau_options_default",
                doc: &["torch's ReduceLROnPlateau defaults."],
                params: &[],
                core: "PlateauOptions::default()",
                go: "DefaultPlateauOptions",
                go_doc: &["DefaultPlateauOptions are torch's ReduceLROnPlateau defaults."],
            },
        ],
        go: "PlateauOptions",
        go_doc: &["PlateauOptions are the options of ReduceLROnPlateau (fulmen_plateau_options)."],
    },
    OptionStruct {
        name: "fulmen_cyclic_lr_options",
        area: "schedulers",
        doc: &["CyclicLR options; defaults from `fulmen_cyclic_lr_options_default`."],
        core: "crate::optim::CyclicLrOptions",
        uses: &["crate::optim::CyclicMode"],
        fields: &[
            field("base_lr", F64, &["Lower learning rate (every group)."], "BaseLR", &["BaseLR is the lower learning rate (every group)."]),
            field("max_lr", F64, &["Upper learning rate (every group)."], "MaxLR", &["MaxLR is the upper learning rate (every group)."]),
            field("step_size_up", I64, &["Steps of the rising half (default 2000)."], "StepSizeUp", &["StepSizeUp is the length of the rising half."]),
            field("step_size_down", I64, &["Steps of the falling half; 0 = `step_size_up` (the default)."], "StepSizeDown", &["StepSizeDown is the length of the falling half; 0 means StepSizeUp."]).convert("step_size_down", "(o.step_size_down != 0).then_some(o.step_size_down)", "d.step_size_down.unwrap_or(0)"),
            field("mode", I32, &["A `fulmen_cyclic_mode` (default triangular)."], "Mode", &["Mode scales the amplitude."]).try_convert("mode", "CyclicMode::from_i32(o.mode)", "d.mode as i32").go_as("CyclicMode"),
            field("gamma", F64, &["EXP_RANGE's factor (default 1)."], "Gamma", &["Gamma is CyclicExpRange's factor."]),
            field("cycle_momentum", Bool, &["Cycle the momentum (Adam family: beta1) inversely (default true)."], "CycleMomentum", &["CycleMomentum cycles the momentum (Adam: beta1) inversely."]),
            field("base_momentum", F64, &["Lower momentum (default 0.8)."], "BaseMomentum", &["BaseMomentum is the lower momentum."]),
            field("max_momentum", F64, &["Upper momentum (default 0.9)."], "MaxMomentum", &["MaxMomentum is the upper momentum."]),
        ],
        defaults: &[
            DefaultFn {
                name: "fulmen_cyclic_lr_options_default",
                doc: &["torch's CyclicLR defaults between `base_lr` and `max_lr`."],
                params: &[DefaultParam { name: "base_lr", ty: F64, go: "baseLR" }, DefaultParam { name: "max_lr", ty: F64, go: "maxLR" }],
                core: "CyclicLrOptions::new(base_lr, max_lr)",
                go: "DefaultCyclicLROptions",
                go_doc: &["DefaultCyclicLROptions are torch's CyclicLR defaults between baseLR and", "maxLR."],
            },
        ],
        go: "CyclicLROptions",
        go_doc: &["CyclicLROptions are the options of CyclicLR (fulmen_cyclic_lr_options)."],
    },
];

#[cfg(test)]
#[path = "options_table_tests.rs"]
mod tests;
