//! The module tree: leaves are built-in layers or TorchScript modules,
//! containers are `Sequential` (children "0", "1", ...) or named containers.
use super::exported::ExportedModule;
use super::host::HostForward;
use super::layers::attention::MultiheadAttention;
use super::layers::conv::{Conv, Conv2d, Conv2dConfig, ConvConfig};
use super::layers::conv_transpose::{ConvTranspose, ConvTransposeConfig};
use super::layers::dropout::Dropout;
use super::layers::embedding::Embedding;
use super::layers::flatten::{Flatten, Unflatten};
use super::layers::group_norm::{GroupNorm, RmsNorm};
use super::layers::instance_norm::InstanceNorm;
use super::layers::linear::Linear;
use super::layers::norm::{BatchNorm, LayerNorm};
use super::layers::pool::{AdaptivePool, Pool2d, PoolKind};
use super::layers::prelu::PRelu;
use super::layers::rnn::{Rnn, RnnConfig, RnnKind};
use super::layers::transformer::{TransformerConfig, TransformerLayer};
use super::layers::upsample::Upsample;
use super::layers::{Activation, Layer, TensorMap};
use super::torchscript::ScriptModule;
use crate::error::{Error, ErrorCode, Result, ResultExt};
use crate::tensor::device::{self as devices, Device};
use std::sync::Arc;
use tch::{Kind, Tensor};

/// A node of a model, like a `torch.nn.Module`: a built-in layer, a
/// TorchScript module, a `Sequential` or a named container. `Send`.
#[derive(Debug)]
pub struct Module {
    pub(crate) node: Node,
    training: bool,
    /// Parameters and buffers the host registered on this module.
    pub(crate) own: Vec<(String, Tensor, Slot)>,
    /// The host's forward pass of a host module (a named container).
    pub(crate) host: Option<Arc<dyn HostForward>>,
    /// Compiled training steps added to this model.
    pub(crate) compiled: Vec<Arc<super::compiled_step::CompiledStep>>,
    /// The sharding unit its parameters belong to (FSDP), while a run
    /// shards the model.
    pub(crate) shard: Option<super::shard_hook::ShardLink>,
    /// Whether its forward is checkpointed (`activation_checkpoint.rs`):
    /// activations not kept, the forward run again in backward. Set by the
    /// host ([`Module::set_activation_checkpointing`]).
    pub(crate) checkpointed: bool,
    /// The same, set by a strategy's policy for a run (FSDP's
    /// `activation_checkpointing_policy`) and cleared after it.
    pub(crate) checkpointed_by_strategy: bool,
}

#[derive(Debug)]
pub(crate) enum Node {
    Layer(Box<dyn Layer>),
    Sequential(Vec<(String, Module)>),
    Named(Vec<(String, Module)>),
    Script(ScriptModule),
    Exported(ExportedModule),
}

/// Whether a state tensor is a parameter or a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Param,
    Buffer,
}

impl Module {
    fn of(node: Node) -> Module {
        Module {
            node,
            training: true,
            own: Vec::new(),
            host: None,
            compiled: Vec::new(),
            shard: None,
            checkpointed: false,
            checkpointed_by_strategy: false,
        }
    }

    fn leaf(layer: impl Layer + 'static) -> Module {
        Module::of(Node::Layer(Box::new(layer)))
    }

    pub(crate) fn from_script(script: ScriptModule) -> Module {
        Module::of(Node::Script(script))
    }

    pub(crate) fn from_exported(exported: ExportedModule) -> Module {
        Module::of(Node::Exported(exported))
    }

    /// `nn.Linear(in_features, out_features, bias)`.
    pub fn linear(in_features: i64, out_features: i64, bias: bool) -> Result<Module> {
        Ok(Module::leaf(Linear::new(in_features, out_features, bias)?))
    }

    /// `nn.Conv2d` with explicit stride, padding, dilation and groups.
    #[allow(clippy::too_many_arguments)]
    pub fn conv2d(
        in_channels: i64,
        out_channels: i64,
        kernel: [i64; 2],
        stride: [i64; 2],
        padding: [i64; 2],
        dilation: [i64; 2],
        groups: i64,
        bias: bool,
    ) -> Result<Module> {
        let cfg = Conv2dConfig { in_channels, out_channels, kernel, stride, padding, dilation, groups, bias };
        Ok(Module::leaf(Conv2d::new(cfg)?))
    }

    /// `nn.Conv1d(in, out, kernel, stride, padding, dilation, groups, bias)`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        in_channels: i64,
        out_channels: i64,
        kernel: i64,
        stride: i64,
        padding: i64,
        dilation: i64,
        groups: i64,
        bias: bool,
    ) -> Result<Module> {
        let cfg = ConvConfig::<1> {
            in_channels,
            out_channels,
            kernel: [kernel],
            stride: [stride],
            padding: [padding],
            dilation: [dilation],
            groups,
            bias,
        };
        Ok(Module::leaf(Conv::new(cfg)?))
    }

    /// `nn.Conv3d` with explicit stride, padding, dilation and groups.
    pub fn conv3d(cfg: ConvConfig<3>) -> Result<Module> {
        Ok(Module::leaf(Conv::new(cfg)?))
    }

    /// `nn.ConvTranspose1d` (`N` = 1) or `nn.ConvTranspose2d` (`N` = 2).
    pub fn conv_transpose<const N: usize>(cfg: ConvTransposeConfig<N>) -> Result<Module> {
        Ok(Module::leaf(ConvTranspose::new(cfg)?))
    }

    /// `nn.InstanceNorm1d` (`dims` 1) or `nn.InstanceNorm2d` (`dims` 2).
    pub fn instance_norm(
        dims: usize,
        num_features: i64,
        eps: f64,
        momentum: f64,
        affine: bool,
        track_running_stats: bool,
    ) -> Result<Module> {
        Ok(Module::leaf(InstanceNorm::new(dims, num_features, eps, momentum, affine, track_running_stats)?))
    }

    /// `nn.AdaptiveAvgPool1d/2d(output_size)` (`max` false) or
    /// `nn.AdaptiveMaxPool1d/2d` (`max` true): 1 or 2 sizes, -1 keeps one.
    pub fn adaptive_pool(max: bool, output_size: &[i64]) -> Result<Module> {
        let kind = if max { PoolKind::Max } else { PoolKind::Avg };
        Ok(Module::leaf(AdaptivePool::new(kind, output_size)?))
    }

    /// `nn.Upsample(size or scale_factor, mode, align_corners)`.
    pub fn upsample(size: &[i64], scale_factor: f64, mode: &str, align_corners: bool) -> Result<Module> {
        Ok(Module::leaf(Upsample::new(size, scale_factor, mode, align_corners)?))
    }

    /// `nn.MaxPool2d(kernel, stride, padding)`.
    pub fn max_pool2d(kernel: [i64; 2], stride: [i64; 2], padding: [i64; 2]) -> Result<Module> {
        Ok(Module::leaf(Pool2d::new(PoolKind::Max, kernel, stride, padding)?))
    }

    /// `nn.AvgPool2d(kernel, stride, padding)` (`count_include_pad = True`).
    pub fn avg_pool2d(kernel: [i64; 2], stride: [i64; 2], padding: [i64; 2]) -> Result<Module> {
        Ok(Module::leaf(Pool2d::new(PoolKind::Avg, kernel, stride, padding)?))
    }

    /// `nn.BatchNorm1d/2d`: normalises dimension 1 of 2-D to 5-D input.
    /// Buffers `running_mean`, `running_var`, `num_batches_tracked` (int64)
    /// exist when `track_running_stats`; `weight`/`bias` when `affine`.
    pub fn batch_norm(
        num_features: i64,
        eps: f64,
        momentum: f64,
        affine: bool,
        track_running_stats: bool,
    ) -> Result<Module> {
        let bn = BatchNorm::new(num_features, eps, momentum, affine, track_running_stats)?;
        Ok(Module::leaf(bn))
    }

    /// `nn.LayerNorm(normalized_shape, eps, elementwise_affine)`.
    pub fn layer_norm(normalized_shape: &[i64], eps: f64, elementwise_affine: bool) -> Result<Module> {
        Ok(Module::leaf(LayerNorm::new(normalized_shape, eps, elementwise_affine)?))
    }

    /// `nn.GroupNorm(num_groups, num_channels, eps, affine)`.
    pub fn group_norm(num_groups: i64, num_channels: i64, eps: f64, affine: bool) -> Result<Module> {
        Ok(Module::leaf(GroupNorm::new(num_groups, num_channels, eps, affine)?))
    }

    /// `nn.RMSNorm(normalized_shape, eps, elementwise_affine)`; `eps` None
    /// is the input dtype's machine epsilon.
    pub fn rms_norm(normalized_shape: &[i64], eps: Option<f64>, elementwise_affine: bool) -> Result<Module> {
        Ok(Module::leaf(RmsNorm::new(normalized_shape, eps, elementwise_affine)?))
    }

    /// `nn.PReLU(num_parameters, init)`.
    pub fn prelu(num_parameters: i64, init: f64) -> Result<Module> {
        Ok(Module::leaf(PRelu::new(num_parameters, init)?))
    }

    /// `nn.Unflatten(dim, sizes)`.
    pub fn unflatten(dim: i64, sizes: &[i64]) -> Result<Module> {
        crate::tensor::ops::checks::check_unflatten_sizes(sizes).map_err(|e| Error::invalid(e.message))?;
        Ok(Module::leaf(Unflatten { dim, sizes: sizes.to_vec() }))
    }

    /// `nn.Dropout(p)`: active only in training mode.
    pub fn dropout(p: f64) -> Result<Module> {
        Ok(Module::leaf(Dropout::new(p, false)?))
    }

    /// `nn.Dropout2d(p)`: zeroes whole channels, in training mode only.
    pub fn dropout2d(p: f64) -> Result<Module> {
        Ok(Module::leaf(Dropout::new(p, true)?))
    }

    /// `nn.Embedding(num_embeddings, dim)`: takes int64/int32 indices.
    pub fn embedding(num_embeddings: i64, dim: i64) -> Result<Module> {
        Ok(Module::leaf(Embedding::new(num_embeddings, dim, None)?))
    }

    /// `nn.Embedding(num_embeddings, dim, padding_idx)`: that row starts
    /// at zero and is never trained.
    pub fn embedding_padded(num_embeddings: i64, dim: i64, padding_idx: i64) -> Result<Module> {
        Ok(Module::leaf(Embedding::new(num_embeddings, dim, Some(padding_idx))?))
    }

    /// `nn.RNN` (`RnnKind::Tanh` / `Relu`), `nn.LSTM` or `nn.GRU` with
    /// PyTorch's parameter names and init. `forward` gives the output
    /// sequence; `forward_multi` takes `[input, h0, (c0,) lengths]` and
    /// gives `[output, h_n (, c_n)]`.
    pub fn rnn(kind: RnnKind, cfg: RnnConfig) -> Result<Module> {
        Ok(Module::leaf(Rnn::new(kind, cfg)?))
    }

    /// `nn.MultiheadAttention(embed_dim, num_heads, dropout, bias,
    /// batch_first=...)`. `forward` is self-attention; `forward_multi`
    /// takes `[query, key, value, key_padding_mask, attn_mask]` and gives
    /// `[output, weights averaged over heads]`.
    pub fn multihead_attention(
        embed_dim: i64,
        num_heads: i64,
        dropout: f64,
        bias: bool,
        batch_first: bool,
    ) -> Result<Module> {
        Ok(Module::leaf(MultiheadAttention::new(embed_dim, num_heads, dropout, bias, batch_first)?))
    }

    /// `nn.TransformerEncoderLayer`; `forward_multi` takes `[src, src_mask,
    /// src_key_padding_mask]`.
    pub fn transformer_encoder_layer(cfg: TransformerConfig) -> Result<Module> {
        Ok(Module::leaf(TransformerLayer::new(cfg, false)?))
    }

    /// `nn.TransformerDecoderLayer`; `forward_multi` takes `[tgt, memory,
    /// tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask]`.
    pub fn transformer_decoder_layer(cfg: TransformerConfig) -> Result<Module> {
        Ok(Module::leaf(TransformerLayer::new(cfg, true)?))
    }

    /// `nn.Flatten(start_dim, end_dim)`.
    pub fn flatten(start_dim: i64, end_dim: i64) -> Module {
        Module::leaf(Flatten { start_dim, end_dim })
    }

    /// An activation as a layer (`nn.ReLU()`, `nn.Softmax(dim)`, ...).
    pub fn activation(act: Activation) -> Module {
        Module::leaf(act)
    }

    /// An empty `nn.Sequential`: children run in order, named "0", "1", ...
    pub fn sequential() -> Module {
        Module::of(Node::Sequential(Vec::new()))
    }

    /// An empty named container: children are added by name, like the
    /// attributes of a custom `nn.Module`; it has no forward of its own.
    pub fn named() -> Module {
        Module::of(Node::Named(Vec::new()))
    }

    /// PyTorch-like type name: "Sequential", "Module" (named container),
    /// "ScriptModule" or the layer's class ("Linear", "BatchNorm", ...).
    pub fn type_name(&self) -> &'static str {
        match &self.node {
            Node::Layer(l) => l.type_name(),
            Node::Sequential(_) => "Sequential",
            Node::Named(_) if self.host.is_some() => "HostModule",
            Node::Named(_) => "Module",
            Node::Script(_) => "ScriptModule",
            Node::Exported(_) => "ExportedProgram",
        }
    }

    fn children(&self) -> &[(String, Module)] {
        match &self.node {
            Node::Sequential(c) | Node::Named(c) => c,
            _ => &[],
        }
    }

    /// Whether children can be added (a Sequential, a named container or a
    /// host module).
    pub fn holds_children(&self) -> bool {
        matches!(self.node, Node::Sequential(_) | Node::Named(_))
    }

    /// Names of the direct children, in order (empty for leaves).
    pub fn child_names(&self) -> Vec<String> {
        self.children().iter().map(|(n, _)| n.clone()).collect()
    }

    /// Appends a child to a `Sequential`, named by its position.
    pub fn push(&mut self, child: Module) -> Result<()> {
        match &self.node {
            Node::Sequential(c) => {
                let name = c.len().to_string();
                self.add(&name, child)
            }
            _ => Err(Error::invalid(format!(
                "push: only a Sequential takes unnamed children, this is a {}; use add(name, child)",
                self.type_name()
            ))),
        }
    }

    /// Adds a named child to a named container or a `Sequential` (where it
    /// runs after the existing children). Names are non-empty, unique and
    /// contain no '.'.
    pub fn add(&mut self, name: &str, child: Module) -> Result<()> {
        if name.is_empty() || name.contains('.') {
            return Err(Error::invalid(format!("add: child name {name:?} must be non-empty and contain no '.'")));
        }
        let type_name = self.type_name();
        match &mut self.node {
            Node::Sequential(c) | Node::Named(c) => {
                if c.iter().any(|(n, _)| n == name) || self.own.iter().any(|(n, _, _)| n == name) {
                    return Err(Error::invalid(format!("add: a child or tensor named {name:?} already exists")));
                }
                c.push((name.to_string(), child));
                Ok(())
            }
            _ => Err(Error::invalid(format!("add: a {type_name} is a leaf and cannot hold children"))),
        }
    }

    /// The descendant at a dotted path ("encoder.0"); "" is `self`.
    pub fn child(&self, path: &str) -> Result<&Module> {
        let mut cur = self;
        if path.is_empty() {
            return Ok(cur);
        }
        for part in path.split('.') {
            cur = cur
                .children()
                .iter()
                .find(|(n, _)| n == part)
                .map(|(_, m)| m)
                .ok_or_else(|| no_child(path, part, cur))?;
        }
        Ok(cur)
    }

    /// Mutable access to the descendant at a dotted path.
    pub fn child_mut(&mut self, path: &str) -> Result<&mut Module> {
        let mut cur = self;
        if path.is_empty() {
            return Ok(cur);
        }
        for part in path.split('.') {
            let err = no_child(path, part, cur);
            cur = match &mut cur.node {
                Node::Sequential(c) | Node::Named(c) => {
                    c.iter_mut().find(|(n, _)| n == part).map(|(_, m)| m).ok_or(err)?
                }
                _ => return Err(err),
            };
        }
        Ok(cur)
    }

    /// Runs the module. A `Sequential` runs its children in order; a named
    /// container has no forward of its own (use `forward_child`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let _flops = self.flop_scope();
        let cast = self.unit_input(x)?;
        let x = cast.as_ref().unwrap_or(x);
        self.note_unit_inputs([x]);
        self.sharded(
            |y: &Tensor| vec![y.shallow_clone()],
            || {
                if !self.is_checkpointed() {
                    return self.forward_inner(x);
                }
                let mut out = super::activation_checkpoint::run(self, &[Some(x)], true)?;
                match out.len() {
                    1 => Ok(out.remove(0)),
                    n => Err(Error::state(format!("a checkpointed forward returned {n} tensors, expected 1"))),
                }
            },
        )
    }

    /// Checkpoints the forward of the module at `path` ("" for this one),
    /// or stops (torch's `torch.utils.checkpoint` around that module): its
    /// activations are not kept, and backward runs its forward again under
    /// the first run's generator states and autocast, so the gradients are
    /// those of the plain forward. Refused (`Unsupported`) for a module
    /// holding a TorchScript or exported module.
    pub fn set_activation_checkpointing(&mut self, path: &str, on: bool) -> Result<()> {
        let m = self.child_mut(path)?;
        if on && m.holds_script() {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "activation checkpointing of {path:?}: it holds a TorchScript or exported module, which fulmen \
                     cannot run again in backward"
                ),
            ));
        }
        m.checkpointed = on;
        Ok(())
    }

    /// Whether its forward is checkpointed, by the host or a strategy.
    pub(crate) fn is_checkpointed(&self) -> bool {
        self.checkpointed || self.checkpointed_by_strategy
    }

    /// Whether this module or one below it checkpoints its forward.
    pub(crate) fn checkpoints_any(&self) -> bool {
        self.is_checkpointed() || self.children().iter().any(|(_, c)| c.checkpoints_any())
    }

    /// Whether the subtree holds a TorchScript or exported module.
    pub(crate) fn holds_script(&self) -> bool {
        matches!(self.node, Node::Script(_) | Node::Exported(_))
            || self.children().iter().any(|(_, c)| c.holds_script())
    }

    /// [`Module::forward`] without the module's own sharding unit hooks and
    /// checkpoint (its descendants' kept): also what a checkpoint runs.
    pub(crate) fn forward_inner(&self, x: &Tensor) -> Result<Tensor> {
        match &self.node {
            Node::Layer(l) => l.forward(x, self.training),
            Node::Script(s) => s.forward(x),
            Node::Exported(e) => e
                .call("forward", &[super::Value::Tensor(x.shallow_clone())])?
                .into_tensor("the exported forward")
                .map_err(|e| e.context("the forward program returns more than a tensor: use call_method")),
            Node::Sequential(children) => {
                let mut y = x.shallow_clone();
                for (name, m) in children {
                    let _flops = super::flop_counter::ModuleScope::child(name);
                    y = m.forward(&y).map_err(|e| e.context(format!("Sequential child {name} ({})", m.type_name())))?;
                }
                Ok(y)
            }
            Node::Named(_) if self.host.is_some() => {
                let mut out = self.forward_multi_inner(&[Some(x)])?;
                if out.len() != 1 {
                    return Err(Error::invalid(format!(
                        "forward: this host module returns {} tensors; use forward_multi",
                        out.len()
                    )));
                }
                Ok(out.remove(0))
            }
            Node::Named(children) => {
                let names: Vec<&str> = children.iter().map(|(n, _)| n.as_str()).collect();
                Err(Error::new(
                    ErrorCode::Unsupported,
                    format!(
                        "forward: a named container has no forward of its own; call its children \
                         by name with forward_child (children: {names:?})"
                    ),
                ))
            }
        }
    }

    /// Runs the module on several inputs (`None` for a left-out optional
    /// one) and returns all its results: `(output, (h_n, c_n))` of an LSTM,
    /// the masks of attention, the memory of a decoder layer. Layers with
    /// one input and one result and a `Sequential` (which passes one
    /// tensor along) take exactly one input. A TorchScript module's forward
    /// takes the inputs as its arguments; a tuple it returns is split.
    pub fn forward_multi(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let _flops = self.flop_scope();
        let cast = inputs.iter().map(|i| i.map_or(Ok(None), |t| self.unit_input(t))).collect::<Result<Vec<_>>>()?;
        let inputs: Vec<Option<&Tensor>> = inputs.iter().zip(&cast).map(|(i, c)| c.as_ref().or(*i)).collect();
        let inputs = inputs.as_slice();
        self.note_unit_inputs(inputs.iter().flatten().copied());
        self.sharded(
            |ys: &Vec<Tensor>| ys.iter().map(Tensor::shallow_clone).collect(),
            || match self.is_checkpointed() {
                true => super::activation_checkpoint::run(self, inputs, false),
                false => self.forward_multi_inner(inputs),
            },
        )
    }

    /// [`Module::forward_multi`] without the module's own sharding unit
    /// hooks and checkpoint.
    pub(crate) fn forward_multi_inner(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        if let Some(host) = &self.host {
            let out = host.forward(self, inputs)?;
            if out.len() != host.num_outputs() {
                return Err(Error::state(format!(
                    "the host forward returned {} tensors, its num_outputs is {}",
                    out.len(),
                    host.num_outputs()
                )));
            }
            return Ok(out);
        }
        match &self.node {
            Node::Layer(l) => l.forward_multi(inputs, self.training),
            Node::Script(s) => s.forward_multi(inputs),
            Node::Exported(e) => {
                let args: Vec<super::Value> = inputs
                    .iter()
                    .map(|x| x.map_or(super::Value::None, |t| super::Value::Tensor(t.shallow_clone())))
                    .collect();
                match e.call("forward", &args)? {
                    super::Value::Tuple(items) | super::Value::List(items) => items
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| v.into_tensor(&format!("forward result {i}")))
                        .collect(),
                    other => Ok(vec![other.into_tensor("forward result")?]),
                }
            }
            _ => match inputs {
                [Some(x)] => Ok(vec![self.forward_inner(x)?]),
                _ => Err(Error::invalid(format!(
                    "forward_multi: a {} takes exactly one input, got {} (left-out inputs included)",
                    self.type_name(),
                    inputs.len()
                ))),
            },
        }
    }

    /// How many tensors [`Module::forward_multi`] returns.
    pub fn num_outputs(&self) -> Result<usize> {
        if let Some(host) = &self.host {
            return Ok(host.num_outputs());
        }
        match &self.node {
            Node::Layer(l) => Ok(l.num_outputs()),
            Node::Script(s) => s.num_returns("forward"),
            Node::Exported(e) => e.num_returns("forward"),
            _ => Ok(1),
        }
    }

    /// Runs the descendant at a dotted path.
    pub fn forward_child(&self, path: &str, x: &Tensor) -> Result<Tensor> {
        let child = self.child(path)?;
        let _flops = self.child_flop_scopes(path);
        child.forward(x).map_err(|e| e.context(format!("child {path}")))
    }

    /// Opens the scopes for FLOP counts by module of this module (when it
    /// is the measurement's root) and of its descendant at `path` ("" for
    /// itself), for a child run by path; closed on drop.
    pub(crate) fn child_flop_scopes(
        &self,
        path: &str,
    ) -> (super::flop_counter::ModuleScope, Option<super::flop_counter::ModuleScope>) {
        (self.flop_scope(), (!path.is_empty()).then(|| super::flop_counter::ModuleScope::child(path)))
    }

    /// Opens this module's scope for FLOP counts by module when it runs
    /// as the root of a measurement: named by its class. TorchScript and
    /// exported modules name their own root.
    pub(crate) fn flop_scope(&self) -> super::flop_counter::ModuleScope {
        super::flop_counter::ModuleScope::root(|| match self.node {
            Node::Script(_) | Node::Exported(_) => None,
            _ => Some(self.type_name().to_owned()),
        })
    }

    /// Switches this module and all descendants to training (`true`) or
    /// evaluation mode, like `nn.Module.train()` / `eval()`.
    pub fn set_training(&mut self, on: bool) -> Result<()> {
        self.training = on;
        match &mut self.node {
            Node::Sequential(c) | Node::Named(c) => {
                for (_, m) in c.iter_mut() {
                    m.set_training(on)?;
                }
                Ok(())
            }
            Node::Script(s) => s.set_training(on),
            // An exported program's mode is the one it was exported in.
            Node::Layer(_) | Node::Exported(_) => Ok(()),
        }
    }

    /// Whether this module is in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// Calls `f(name, tensor, slot)` for every parameter and buffer in
    /// PyTorch's `state_dict` order: per module its parameters, then its
    /// buffers, then its children.
    pub(crate) fn visit(&self, prefix: &str, f: &mut dyn FnMut(String, &Tensor, Slot)) {
        self.visit_direct(&mut |n, t, slot| f(format!("{prefix}{n}"), t, slot));
        if let Node::Sequential(c) | Node::Named(c) = &self.node {
            for (name, m) in c {
                m.visit(&format!("{prefix}{name}."), f);
            }
        }
    }

    /// Calls `f` for every parameter and buffer in `visit`'s order, without
    /// making their names (cheap enough to run every step).
    pub(crate) fn visit_tensors(&self, f: &mut dyn FnMut(&Tensor)) {
        self.visit_direct(&mut |_, t, _| f(t));
        if let Node::Sequential(c) | Node::Named(c) = &self.node {
            for (_, m) in c {
                m.visit_tensors(f);
            }
        }
    }

    /// This module's own parameters, then its own buffers (a layer's, then
    /// those the host registered), without children. A TorchScript
    /// module's come in its state_dict order (submodule by submodule).
    pub(crate) fn visit_direct(&self, f: &mut dyn FnMut(&str, &Tensor, Slot)) {
        let own = |want: Slot, f: &mut dyn FnMut(&str, &Tensor, Slot)| {
            for (n, t, slot) in &self.own {
                if *slot == want {
                    f(n, t, want);
                }
            }
        };
        match &self.node {
            Node::Layer(l) => {
                for (n, t) in l.params() {
                    f(n, t, Slot::Param);
                }
                own(Slot::Param, f);
                for (n, t) in l.buffers() {
                    f(n, t, Slot::Buffer);
                }
                own(Slot::Buffer, f);
            }
            Node::Script(s) => {
                for (n, t, buffer) in s.state() {
                    f(n, t, if buffer { Slot::Buffer } else { Slot::Param });
                }
                own(Slot::Param, f);
                own(Slot::Buffer, f);
            }
            Node::Exported(e) => {
                for (n, t, buffer) in e.state() {
                    f(n, t, if buffer { Slot::Buffer } else { Slot::Param });
                }
                own(Slot::Param, f);
                own(Slot::Buffer, f);
            }
            Node::Sequential(_) | Node::Named(_) => {
                own(Slot::Param, f);
                own(Slot::Buffer, f);
            }
        }
    }

    /// The tensors of one slot (each once, under its first name, as
    /// PyTorch's `named_parameters()` / `named_buffers()` with
    /// `remove_duplicate=True`) or, for `None`, every name of both.
    fn collect(&self, want: Option<Slot>) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        self.visit("", &mut |name, t, slot| {
            let keep = match want {
                None => true,
                Some(w) => w == slot && param_identity(t).is_none_or(|id| seen.insert(id)),
            };
            if keep {
                out.push((name, t.shallow_clone()));
            }
        });
        out
    }

    /// Parameters with PyTorch's dotted names, in PyTorch's order ("0.weight",
    /// "encoder.1.bias"). The tensors are shallow clones: the same leaves.
    /// A tied parameter (one tensor under several names) comes once, under
    /// its first name, so optimizers, gradient clipping, DDP and the
    /// summary's counts see it once.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.collect(Some(Slot::Param))
    }

    /// The parameters (shallow clones), in `named_parameters` order.
    pub fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters().into_iter().map(|(_, t)| t).collect()
    }

    /// Buffers with dotted names ("bn.running_mean", ...), a tied one once.
    pub fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.collect(Some(Slot::Buffer))
    }

    /// Parameters and buffers in PyTorch's `state_dict` order (shallow
    /// clones): a tied tensor under each of its names.
    pub fn state_dict(&self) -> Vec<(String, Tensor)> {
        self.collect(None)
    }

    /// Total number of parameter elements (a tied parameter counted once).
    pub fn num_parameters(&self) -> i64 {
        self.parameters().iter().map(|t| t.numel() as i64).sum()
    }

    /// Moves every parameter and buffer to `device`, in place (`param.data =
    /// ...` as PyTorch does), so parameters stay the same leaf tensors;
    /// where libtorch cannot change a tensor's type so (the CPU and XLA),
    /// the module's handles get new leaf tensors, as PyTorch's `_apply`
    /// makes new Parameters (tied names stay one tensor).
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        device.check_available()?;
        self.convert(Some(device), None).ctx(format!("to_device({device:?})"))
    }

    /// Whether every parameter and buffer can move to `device` in place
    /// (`param.data = ...`), so that each may move on its own
    /// ([`move_in_place`]); false where libtorch refuses that between the
    /// tensor types (the CPU and XLA). Meta tensors answer for the CPU
    /// tensors they become ([`Module::materialize`]).
    pub(crate) fn moves_in_place(&self, device: Device) -> Result<bool> {
        let probe = devices::to_device(&Tensor::f_empty([0], (Kind::Float, tch::Device::Cpu))?, device, false)?;
        let mut result = Ok(true);
        self.visit("", &mut |_, t, _| {
            if matches!(result, Ok(true)) {
                // A meta tensor moves as the CPU tensor it becomes.
                result = t.f_kind().map_err(Into::into).and_then(|k| {
                    let t = if super::meta_init::is_meta(t) {
                        Tensor::f_empty([0], (k, tch::Device::Cpu))?
                    } else {
                        t.shallow_clone()
                    };
                    devices::set_data_compatible(&t, &probe.f_to_kind(k)?)
                });
            }
        });
        result
    }

    /// Moves to `device`, in place, every parameter and buffer that `held`
    /// does not hold back, as [`Module::to_device`] does but without the
    /// layers' settling (cuDNN's flat RNN weights): FSDP moves the
    /// parameters it holds back unit by unit as it shards them. Needs
    /// [`Module::moves_in_place`].
    pub(crate) fn move_to_device_except(&self, device: Device, held: &dyn Fn(&Tensor) -> bool) -> Result<()> {
        device.check_available()?;
        let mut result = Ok(());
        self.visit("", &mut |_, t, _| {
            if result.is_ok() && !held(t) {
                result = move_in_place(t, device).map(drop);
            }
        });
        result.ctx(format!("to_device({device:?})"))
    }

    /// A replica of the module on `device` (DataParallel's `replicate`):
    /// the same structure and mode, every parameter and buffer
    /// `tensor.to(device)`, so the gradients of the replica's parameters
    /// flow back into this module's (on the module's own device the replica
    /// shares its tensors). A TorchScript module is cloned with its tensors
    /// mapped the same way.
    pub fn replicate(&self, device: Device) -> Result<Module> {
        device.check_available()?;
        self.replicate_with(&mut |t: &Tensor| devices::to_device(t, device, false))
    }

    fn replicate_with(&self, map: &mut TensorMap<'_>) -> Result<Module> {
        self.copy_with(map, false)
    }

    /// What a checkpoint runs again in backward: this module's structure
    /// and mode over the same tensors, its descendants keeping their
    /// sharding units and checkpoints. TorchScript and exported modules
    /// are refused (their copies are deep).
    pub(crate) fn checkpoint_copy(&self) -> Result<Module> {
        self.copy_with(&mut |t: &Tensor| Ok(t.shallow_clone()), true)
    }

    /// A copy with every tensor mapped by `map`; `links` keeps the
    /// descendants' sharding units and checkpoints.
    fn copy_with(&self, map: &mut TensorMap<'_>, links: bool) -> Result<Module> {
        let children = |c: &[(String, Module)], map: &mut TensorMap<'_>| -> Result<Vec<(String, Module)>> {
            c.iter()
                .map(|(n, m)| {
                    let mut copy = m.copy_with(map, links)?;
                    if links {
                        copy.shard = m.shard.clone();
                        copy.checkpointed = m.checkpointed;
                        copy.checkpointed_by_strategy = m.checkpointed_by_strategy;
                    }
                    Ok((n.clone(), copy))
                })
                .collect()
        };
        if links && matches!(self.node, Node::Script(_) | Node::Exported(_)) {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!("activation checkpointing of a module holding a {} module", self.type_name()),
            ));
        }
        let node = match &self.node {
            Node::Layer(l) => Node::Layer(l.replicate(map)?),
            Node::Sequential(c) => Node::Sequential(children(c, map)?),
            Node::Named(c) => Node::Named(children(c, map)?),
            Node::Script(s) => Node::Script(s.replicate(map)?),
            Node::Exported(e) => Node::Exported(e.replicate(map)?),
        };
        let own = self.own.iter().map(|(n, t, slot)| Ok((n.clone(), map(t)?, *slot))).collect::<Result<Vec<_>>>()?;
        // Compiled steps are bound to this module's device: replicas get none.
        Ok(Module {
            node,
            training: self.training,
            own,
            host: self.host.clone(),
            compiled: Vec::new(),
            shard: None,
            checkpointed: false,
            checkpointed_by_strategy: false,
        })
    }

    /// Casts floating-point parameters and buffers to the floating `kind`
    /// (integer buffers such as `num_batches_tracked` keep theirs).
    pub fn to_kind(&mut self, kind: Kind) -> Result<()> {
        if !is_floating(kind) {
            return Err(Error::dtype(format!("to_kind: {kind:?} is not a floating-point kind")));
        }
        self.convert(None, Some(kind)).ctx(format!("to_kind({kind:?})"))
    }

    /// Converts every parameter and buffer of the tree in place, then lets
    /// each layer settle on its new device or dtype.
    fn convert(&mut self, device: Option<Device>, kind: Option<Kind>) -> Result<()> {
        let mut result = Ok(());
        let mut changed = false;
        let mut replaced = std::collections::HashMap::new();
        self.visit("", &mut |_, t, _| {
            if result.is_ok() {
                match convert_tensor(t, device, kind, &mut replaced) {
                    Ok(c) => changed |= c,
                    Err(e) => result = Err(e),
                }
            }
        });
        // Only after a real change: a layer's rearrangement (cuDNN's flat
        // RNN weights) is a new buffer and an in-place change.
        if changed {
            self.after_convert();
        }
        // Also after a failure part-way: the handles changed so far.
        let written = if replaced.is_empty() { Ok(()) } else { self.write_scripts_back() };
        result.and(written)
    }

    /// TorchScript modules hold their tensors in their own slots too: after
    /// a move gave the handles new tensors, the slots get them.
    fn write_scripts_back(&self) -> Result<()> {
        match &self.node {
            Node::Script(s) => s.write_state_back(),
            Node::Sequential(c) | Node::Named(c) => c.iter().try_for_each(|(_, m)| m.write_scripts_back()),
            Node::Layer(_) | Node::Exported(_) => Ok(()),
        }
    }

    pub(super) fn after_convert(&self) {
        match &self.node {
            Node::Layer(l) => l.after_convert(),
            Node::Sequential(c) | Node::Named(c) => c.iter().for_each(|(_, m)| m.after_convert()),
            Node::Script(_) | Node::Exported(_) => {}
        }
    }
}

fn no_child(path: &str, part: &str, parent: &Module) -> Error {
    Error::invalid(format!(
        "no child {part:?} on the way to {path:?} (a {} with children {:?})",
        parent.type_name(),
        parent.child_names()
    ))
}

/// What makes two tensor handles one parameter: the address of its first
/// element, its shape, strides, dtype and device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ParamId {
    ptr: usize,
    /// Whether `ptr` is the data's address (else the TensorImpl's, for a
    /// tensor whose data address cannot be read, as torch_xla's).
    data: bool,
    size: Vec<i64>,
    stride: Vec<i64>,
    kind: Kind,
    device: tch::Device,
}

/// A parameter's identity (`ParamId`). `None` for a sparse, oneDNN or
/// empty tensor, which is never the same as another. A meta tensor is
/// known by its storage and offset (its detached copies share them), a
/// tensor whose data address cannot be read otherwise (XLA) by its
/// TensorImpl. Shallow clones of one tensor, and the names of a tied
/// parameter, share it.
pub(crate) fn param_identity(t: &Tensor) -> Option<ParamId> {
    if t.is_sparse() || t.is_mkldnn() || t.numel() == 0 {
        return None;
    }
    let (ptr, data) = devices::data_identity(t).ok()?;
    (ptr != 0).then(|| ParamId { ptr, data, size: t.size(), stride: t.stride(), kind: t.kind(), device: t.device() })
}

/// Whether the memory of `a` and `b` overlaps (the bytes from each one's
/// first element to its last, on one device): views of one storage do.
pub(crate) fn memory_overlaps(a: &ParamId, b: &ParamId) -> bool {
    let end = |id: &ParamId| {
        let last: i64 = id.size.iter().zip(&id.stride).map(|(n, s)| (n - 1) * s.abs()).sum();
        id.ptr.saturating_add((last as usize + 1).saturating_mul(id.kind.elt_size_in_bytes()))
    };
    a.data && b.data && a.device == b.device && a.ptr < end(b) && b.ptr < end(a)
}

/// For each entry of a state_dict, whether an earlier entry holds the same
/// tensor (the later names of a tied parameter or buffer).
pub(crate) fn repeated_entries(state: &[(String, Tensor)]) -> Vec<bool> {
    let mut seen = std::collections::HashSet::new();
    state.iter().map(|(_, t)| param_identity(t).is_some_and(|id| !seen.insert(id))).collect()
}

/// A copy of a state_dict made by `copy`, once per tensor: the later names
/// of a tied tensor share its first copy, as `copy.deepcopy` of a module
/// keeps tied parameters tied.
pub(crate) fn copy_state_tied(
    state: &[(String, Tensor)],
    copy: &mut dyn FnMut(&Tensor) -> Result<Tensor>,
) -> Result<Vec<(String, Tensor)>> {
    let mut first: std::collections::HashMap<ParamId, usize> = std::collections::HashMap::new();
    let mut out: Vec<(String, Tensor)> = Vec::with_capacity(state.len());
    for (name, t) in state {
        let id = param_identity(t);
        let earlier = id.as_ref().and_then(|id| first.get(id).copied());
        let tensor = match earlier {
            Some(i) => out[i].1.shallow_clone(),
            None => {
                if let Some(id) = id {
                    first.insert(id, out.len());
                }
                copy(t)?
            }
        };
        out.push((name.clone(), tensor));
    }
    Ok(out)
}

pub(crate) use crate::tensor::dtype::is_floating;

/// Moves the parameter or buffer `t` (and its gradient) to `device` in
/// place (`t.data = t.data.to(device)`): every handle of it sees the
/// move; whether it moved. Where libtorch cannot change the tensor's type
/// so ([`Module::moves_in_place`]) it fails, and `t`'s own handle holds a
/// new tensor (the module's other handles do not): check first.
pub(crate) fn move_in_place(t: &Tensor, device: Device) -> Result<bool> {
    let mut replaced = std::collections::HashMap::new();
    let moved = convert_tensor(t, Some(device), None, &mut replaced)?;
    if !replaced.is_empty() {
        return Err(Error::new(
            ErrorCode::Unsupported,
            format!("a tensor cannot move to {} in place (libtorch keeps it a new tensor)", device.name()),
        ));
    }
    Ok(moved)
}

/// Converts `t` in place (`set_data`), keeping it the same (leaf) tensor;
/// its gradient, if any, follows. Non-floating tensors keep their kind.
/// Where libtorch cannot set the data of another tensor type (the CPU and
/// XLA), the handle is given a new leaf tensor instead, as PyTorch's
/// `Module._apply` gives a new Parameter; `replaced` maps each old tensor
/// (its TensorImpl) to its new one, so tied names stay one tensor.
/// Returns whether anything changed.
fn convert_tensor(
    t: &Tensor,
    device: Option<Device>,
    kind: Option<Kind>,
    replaced: &mut std::collections::HashMap<usize, Tensor>,
) -> Result<bool> {
    let key = devices::impl_identity(t)?;
    if let Some(new) = replaced.get(&key) {
        devices::assign(t, new)?;
        return Ok(true);
    }
    let cur_kind = t.f_kind()?;
    let cur_dev = Device::of(t)?;
    let new_kind = match kind {
        Some(k) if is_floating(cur_kind) => k,
        _ => cur_kind,
    };
    let new_dev = device.unwrap_or(cur_dev);
    if new_kind == cur_kind && new_dev == cur_dev {
        return Ok(false);
    }
    let convert = |x: &Tensor| -> Result<Tensor> {
        let x = if x.f_kind()? == new_kind { x.shallow_clone() } else { x.f_to_kind(new_kind)? };
        if new_dev == cur_dev {
            Ok(x)
        } else {
            devices::to_device(&x, new_dev, false)
        }
    };
    tch::no_grad(|| -> Result<bool> {
        let data = convert(t)?;
        let grad = t.f_grad()?;
        let grad = if grad.defined() { Some(convert(&grad)?) } else { None };
        if devices::set_data_compatible(t, &data)? {
            // A meta tensor's recorded values follow it to its new storage.
            let before = if super::meta_init::is_meta(t) { Some(super::meta_init::storage_key(t)?) } else { None };
            t.shallow_clone().f_set_data(&data)?;
            if let Some(before) = before {
                super::meta_init::follow(before, t)?;
            }
            if let Some(g) = grad {
                t.f_grad()?.shallow_clone().f_set_data(&g)?;
            }
            return Ok(true);
        }
        let new = data.f_detach()?.f_set_requires_grad(t.requires_grad())?;
        if let Some(g) = grad {
            crate::tensor::grad::set_grad(&new, Some(&g))?;
        }
        devices::assign(t, &new)?;
        replaced.insert(key, new);
        Ok(true)
    })
}
