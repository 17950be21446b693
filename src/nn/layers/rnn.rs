//! `RNN`, `LSTM` and `GRU`: multi-layer, optionally bidirectional recurrent
//! layers on libtorch's fused kernels, with PyTorch's parameter names
//! (`weight_ih_l0`, `bias_hh_l1_reverse`, ...) and default init.
//! Variable-length batches run packed, as `pack_padded_sequence(...,
//! enforce_sorted=False)` then `pad_packed_sequence(total_length=T)` do.
use super::{shape_of, Layer};
use crate::error::{Error, ErrorCode, Result};
use crate::nn::init;
use crate::tensor::device::{self, Device};
use tch::{Kind, Tensor};

/// The most layers a recurrent layer may stack (each is a loop step and
/// four tensors, so an absurd count from an option is refused early).
pub(crate) const MAX_RNN_LAYERS: i64 = 1024;

/// Which recurrence a layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnKind {
    /// Elman RNN with tanh.
    Tanh,
    /// Elman RNN with ReLU.
    Relu,
    /// Long short-term memory.
    Lstm,
    /// Gated recurrent unit.
    Gru,
}

impl RnnKind {
    fn gates(self) -> i64 {
        match self {
            RnnKind::Tanh | RnnKind::Relu => 1,
            RnnKind::Lstm => 4,
            RnnKind::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            RnnKind::Tanh | RnnKind::Relu => "rnn",
            RnnKind::Lstm => "lstm",
            RnnKind::Gru => "gru",
        }
    }
}

/// Settings shared by the three recurrent layers, as PyTorch takes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnnConfig {
    /// Features of each input step.
    pub input_size: i64,
    /// Features of the hidden state.
    pub hidden_size: i64,
    /// Stacked layers.
    pub num_layers: i64,
    /// Whether each layer has `bias_ih` and `bias_hh`.
    pub bias: bool,
    /// Input and output are `(N, T, F)` rather than `(T, N, F)`.
    pub batch_first: bool,
    /// Dropout on the outputs of each layer but the last, in training.
    pub dropout: f64,
    /// Whether each layer also runs backwards.
    pub bidirectional: bool,
}

/// A recurrent layer: PyTorch's `nn.RNN`, `nn.LSTM` or `nn.GRU`.
#[derive(Debug)]
pub(crate) struct Rnn {
    kind: RnnKind,
    cfg: RnnConfig,
    names: Vec<String>,
    weights: Vec<Tensor>,
}

/// The inputs of one call, after the optional ones are sorted out.
struct Call<'a> {
    input: &'a Tensor,
    hx: Vec<Tensor>,
    lengths: Option<&'a Tensor>,
}

impl Rnn {
    /// Validates `cfg` and draws every weight and bias from
    /// `U(-1/sqrt(hidden), 1/sqrt(hidden))` in PyTorch's order.
    pub(crate) fn new(kind: RnnKind, cfg: RnnConfig) -> Result<Rnn> {
        let c = &cfg;
        let name = kind.name();
        if c.input_size <= 0 || c.hidden_size <= 0 || !(1..=MAX_RNN_LAYERS).contains(&c.num_layers) {
            return Err(Error::invalid(format!(
                "{name}: input_size ({}) and hidden_size ({}) must be positive, num_layers ({}) in 1..={MAX_RNN_LAYERS}",
                c.input_size, c.hidden_size, c.num_layers
            )));
        }
        if !(0.0..=1.0).contains(&c.dropout) {
            return Err(Error::invalid(format!("{name}: dropout ({}) must be in [0, 1]", c.dropout)));
        }
        let dirs = if c.bidirectional { 2 } else { 1 };
        let widest = c.hidden_size.checked_mul(dirs).map(|h| h.max(c.input_size));
        let gate_size = c
            .hidden_size
            .checked_mul(kind.gates())
            .filter(|g| widest.and_then(|w| g.checked_mul(w)).is_some())
            .ok_or_else(|| Error::invalid(format!("{name}: hidden_size ({}) is too large", c.hidden_size)))?;
        let bound = init::default_uniform_bound(c.hidden_size);
        let (mut names, mut weights) = (Vec::new(), Vec::new());
        for layer in 0..c.num_layers {
            let layer_input = if layer == 0 { c.input_size } else { c.hidden_size * dirs };
            for dir in 0..dirs {
                let suffix = if dir == 1 { "_reverse" } else { "" };
                let mut add = |what: &str, shape: &[i64]| -> Result<()> {
                    names.push(format!("{what}_l{layer}{suffix}"));
                    weights.push(init::uniform(shape, bound)?);
                    Ok(())
                };
                add("weight_ih", &[gate_size, layer_input])?;
                add("weight_hh", &[gate_size, c.hidden_size])?;
                if c.bias {
                    add("bias_ih", &[gate_size])?;
                    add("bias_hh", &[gate_size])?;
                }
            }
        }
        Ok(Rnn { kind, cfg, names, weights })
    }

    fn dirs(&self) -> i64 {
        if self.cfg.bidirectional {
            2
        } else {
            1
        }
    }

    /// Sorts out the inputs: `[input, h0, (c0,) lengths]`, any but the first left out.
    fn call<'a>(&self, inputs: &[Option<&'a Tensor>]) -> Result<Call<'a>> {
        let name = self.kind.name();
        let states = if self.kind == RnnKind::Lstm { 2 } else { 1 };
        let want = if states == 2 { "input, h0, c0, lengths" } else { "input, h0, lengths" };
        if inputs.is_empty() || inputs.len() > 2 + states {
            return Err(Error::invalid(format!(
                "{name}: takes 1 to {} inputs ({want}), got {}",
                2 + states,
                inputs.len()
            )));
        }
        let input = inputs[0].ok_or_else(|| Error::invalid(format!("{name}: the input is required")))?;
        let get = |i: usize| inputs.get(i).copied().flatten();
        let given: Vec<&Tensor> = (1..=states).filter_map(get).collect();
        if !given.is_empty() && given.len() != states {
            return Err(Error::invalid(format!("{name}: give both h0 and c0, or neither")));
        }
        self.check_input(input)?;
        let hx = given.iter().map(|h| self.check_state(input, h)).collect::<Result<Vec<_>>>()?;
        Ok(Call { input, hx, lengths: get(1 + states) })
    }

    fn check_input(&self, x: &Tensor) -> Result<()> {
        let (name, c) = (self.kind.name(), &self.cfg);
        let size = x.size();
        if !(size.len() == 2 || size.len() == 3) || size.last() != Some(&c.input_size) {
            let layout = if c.batch_first { "(N, T, input_size)" } else { "(T, N, input_size)" };
            return Err(Error::shape(format!(
                "{name}: input of shape {} must be {layout} or (T, input_size) with input_size = {}",
                shape_of(x),
                c.input_size
            )));
        }
        if !crate::tensor::dtype::is_floating(x.f_kind()?) {
            return Err(Error::dtype(format!("{name}: input must be floating point, got {:?}", x.f_kind()?)));
        }
        Ok(())
    }

    /// Checks a given h0 / c0 against the input's batch; returns it batched.
    fn check_state(&self, x: &Tensor, h: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        let layers = self.dirs() * c.num_layers;
        let batched = x.dim() == 3;
        let want = if batched {
            let batch = x.size()[if c.batch_first { 0 } else { 1 }];
            vec![layers, batch, c.hidden_size]
        } else {
            vec![layers, c.hidden_size]
        };
        if h.size() != want {
            return Err(Error::shape(format!(
                "{}: initial state of shape {} must be {want:?} (num_layers * directions, {}hidden_size)",
                self.kind.name(),
                shape_of(h),
                if batched { "N, " } else { "" }
            )));
        }
        if h.f_kind()? != x.f_kind()? || Device::of(h)? != Device::of(x)? {
            return Err(Error::dtype(format!(
                "{}: initial state ({:?} on {}) must match the input ({:?} on {})",
                self.kind.name(),
                h.f_kind()?,
                Device::of(h)?.name(),
                x.f_kind()?,
                Device::of(x)?.name()
            )));
        }
        Ok(if batched { h.shallow_clone() } else { h.f_unsqueeze(1)? })
    }

    /// Checks `lengths` against the batch and the time axis of a batched
    /// input; returns them as int64 on the CPU.
    fn check_lengths(&self, x: &Tensor, lengths: &Tensor) -> Result<Tensor> {
        let name = self.kind.name();
        let c = &self.cfg;
        if x.dim() != 3 {
            return Err(Error::shape(format!("{name}: lengths need a batched input, got {}", shape_of(x))));
        }
        let (batch, steps) = if c.batch_first { (x.size()[0], x.size()[1]) } else { (x.size()[1], x.size()[0]) };
        if !matches!(lengths.f_kind()?, Kind::Int64 | Kind::Int) {
            return Err(Error::dtype(format!("{name}: lengths must be int64 or int32, got {:?}", lengths.f_kind()?)));
        }
        if lengths.size() != [batch] {
            return Err(Error::shape(format!("{name}: lengths of shape {} must be [{batch}]", shape_of(lengths))));
        }
        let l = lengths.f_to_device(tch::Device::Cpu)?.f_to_kind(Kind::Int64)?;
        if batch > 0 {
            let (lo, hi) = (l.f_min()?.f_int64_value(&[])?, l.f_max()?.f_int64_value(&[])?);
            if lo < 1 || hi > steps {
                return Err(Error::new(
                    ErrorCode::OutOfRange,
                    format!("{name}: lengths must lie in 1..={steps} (the time steps), got {lo}..={hi}"),
                ));
            }
        }
        Ok(l)
    }

    /// Runs the recurrence on a batched `x` with batched states `hx`
    /// (zeros when empty); returns `output, h_n (, c_n)`.
    fn run(&self, x: &Tensor, hx: Vec<Tensor>, lengths: Option<&Tensor>, training: bool) -> Result<Vec<Tensor>> {
        let c = &self.cfg;
        let batch_dim = if c.batch_first { 0 } else { 1 };
        let hx = if hx.is_empty() {
            let states = if self.kind == RnnKind::Lstm { 2 } else { 1 };
            let shape = [self.dirs() * c.num_layers, x.size()[batch_dim], c.hidden_size];
            (0..states).map(|_| device::zeros_on_device_of(&shape, x.f_kind()?, x)).collect::<Result<_>>()?
        } else {
            hx
        };
        let Some(lengths) = lengths else {
            return self.run_padded(x, &hx, training);
        };
        let lengths = self.check_lengths(x, lengths)?;
        let steps = x.size()[1 - batch_dim];
        let (sorted_lengths, order) = lengths.f_sort(0, true)?;
        let order_here = device::to_device_of(&order, x)?;
        let restore = order_here.f_argsort(0, false)?;
        let x = x.f_index_select(batch_dim as i64, &order_here)?;
        let hx = hx.iter().map(|h| h.f_index_select(1, &order_here)).collect::<std::result::Result<Vec<_>, _>>()?;
        let (data, batch_sizes) = x.f_internal_pack_padded_sequence(&sorted_lengths, c.batch_first)?;
        let mut out = self.run_packed(&data, &batch_sizes, &hx, training)?;
        let (padded, _) = Tensor::f_internal_pad_packed_sequence(&out[0], &batch_sizes, c.batch_first, 0.0, steps)?;
        out[0] = padded.f_index_select(batch_dim as i64, &restore)?;
        for h in out.iter_mut().skip(1) {
            *h = h.f_index_select(1, &restore)?;
        }
        Ok(out)
    }

    fn run_padded(&self, x: &Tensor, hx: &[Tensor], training: bool) -> Result<Vec<Tensor>> {
        let c = &self.cfg;
        let (w, b, n, p) = (&self.weights, c.bias, c.num_layers, c.dropout);
        let (bi, bf) = (c.bidirectional, c.batch_first);
        Ok(match self.kind {
            RnnKind::Lstm => {
                let (y, h, cell) = x.f_lstm(hx, w, b, n, p, training, bi, bf)?;
                vec![y, h, cell]
            }
            RnnKind::Gru => {
                let (y, h) = x.f_gru(&hx[0], w, b, n, p, training, bi, bf)?;
                vec![y, h]
            }
            RnnKind::Tanh => {
                let (y, h) = x.f_rnn_tanh(&hx[0], w, b, n, p, training, bi, bf)?;
                vec![y, h]
            }
            RnnKind::Relu => {
                let (y, h) = x.f_rnn_relu(&hx[0], w, b, n, p, training, bi, bf)?;
                vec![y, h]
            }
        })
    }

    fn run_packed(&self, data: &Tensor, sizes: &Tensor, hx: &[Tensor], training: bool) -> Result<Vec<Tensor>> {
        let c = &self.cfg;
        let (w, b, n, p, bi) = (&self.weights, c.bias, c.num_layers, c.dropout, c.bidirectional);
        Ok(match self.kind {
            RnnKind::Lstm => {
                let (y, h, cell) = Tensor::f_lstm_data(data, sizes, hx, w, b, n, p, training, bi)?;
                vec![y, h, cell]
            }
            RnnKind::Gru => {
                let (y, h) = Tensor::f_gru_data(data, sizes, &hx[0], w, b, n, p, training, bi)?;
                vec![y, h]
            }
            RnnKind::Tanh => {
                let (y, h) = Tensor::f_rnn_tanh_data(data, sizes, &hx[0], w, b, n, p, training, bi)?;
                vec![y, h]
            }
            RnnKind::Relu => {
                let (y, h) = Tensor::f_rnn_relu_data(data, sizes, &hx[0], w, b, n, p, training, bi)?;
                vec![y, h]
            }
        })
    }
}

impl Layer for Rnn {
    fn replicate(&self, map: &mut super::TensorMap<'_>) -> Result<Box<dyn Layer>> {
        let weights = self.weights.iter().map(&mut *map).collect::<Result<_>>()?;
        Ok(Box::new(Rnn { kind: self.kind, cfg: self.cfg, names: self.names.clone(), weights }))
    }

    /// cuDNN runs an RNN from one flat buffer of weights: after a move to a
    /// GPU the weights become views into one (PyTorch's
    /// `flatten_parameters`); otherwise every call compacts them again and
    /// warns. Where cuDNN cannot take them this is skipped, as in PyTorch.
    fn after_convert(&self) {
        let Some(first) = self.weights.first() else { return };
        let (device, kind) = (first.device(), first.kind());
        // As PyTorch: not when two weights share memory (tied weights).
        // Data pointers are read on CUDA only (other devices, XLA's,
        // may refuse to give one).
        let distinct = || {
            let mut ptrs: Vec<usize> = self.weights.iter().map(|w| w.data_ptr() as usize).collect();
            ptrs.sort_unstable();
            ptrs.dedup();
            ptrs.len() == self.weights.len()
        };
        let acceptable = device.is_cuda()
            && matches!(kind, Kind::Half | Kind::Float | Kind::Double)
            && self.weights.iter().all(|w| w.device() == device && w.kind() == kind)
            && distinct();
        if !acceptable {
            return;
        }
        let mode = match self.kind {
            RnnKind::Relu => 0,
            RnnKind::Tanh => 1,
            RnnKind::Lstm => 2,
            RnnKind::Gru => 3,
        };
        let c = &self.cfg;
        let per_layer = if c.bias { 4 } else { 2 };
        tch::no_grad(|| {
            // A libtorch without cuDNN refuses; the weights then stay apart.
            let _ = Tensor::f_internal_cudnn_rnn_flatten_weight(
                &self.weights,
                per_layer,
                c.input_size,
                mode,
                c.hidden_size,
                0,
                c.num_layers,
                c.batch_first,
                c.bidirectional,
            );
        });
    }

    fn type_name(&self) -> &'static str {
        match self.kind {
            RnnKind::Tanh | RnnKind::Relu => "RNN",
            RnnKind::Lstm => "LSTM",
            RnnKind::Gru => "GRU",
        }
    }

    fn num_outputs(&self) -> usize {
        if self.kind == RnnKind::Lstm {
            3
        } else {
            2
        }
    }

    /// The output sequence only (what a `Sequential` passes on).
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        Ok(self.forward_multi(&[Some(x)], training)?.swap_remove(0))
    }

    /// `[input, h0, (c0,) lengths]` to `[output, h_n (, c_n)]`.
    fn forward_multi(&self, inputs: &[Option<&Tensor>], training: bool) -> Result<Vec<Tensor>> {
        let call = self.call(inputs)?;
        let batched = call.input.dim() == 3;
        if batched {
            return self.run(call.input, call.hx, call.lengths, training);
        }
        if call.lengths.is_some() {
            return Err(Error::shape(format!(
                "{}: lengths need a batched input, got {}",
                self.kind.name(),
                shape_of(call.input)
            )));
        }
        let batch_dim = if self.cfg.batch_first { 0 } else { 1 };
        let x = call.input.f_unsqueeze(batch_dim)?;
        let mut out = self.run(&x, call.hx, None, training)?;
        out[0] = out[0].f_squeeze_dim(batch_dim)?;
        for h in out.iter_mut().skip(1) {
            *h = h.f_squeeze_dim(1)?;
        }
        Ok(out)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        self.names.iter().map(String::as_str).zip(&self.weights).collect()
    }
}
