//! What a sharding strategy attaches to the modules of a model (FSDP's
//! units, `src/strategies/fsdp/`): the module's forward first makes sure
//! the parameters it reads are gathered, and the module a unit is made of
//! hands the unit its outputs afterwards.
use super::exported::{InnerUnit, ModuleTree};
use super::module::{Module, Node};
use crate::error::Result;
use std::sync::Arc;
use tch::Tensor;

/// The unit a module's parameters belong to.
pub(crate) trait ShardHook: Send + Sync + std::fmt::Debug {
    /// Before the module's forward: the unit's parameters hold their full
    /// values (nothing when they already do).
    fn before_forward(&self) -> Result<()>;

    /// After the module's forward, with its outputs; `owns` when the
    /// module is the unit's own (not a descendant of it).
    fn after_forward(&self, outputs: &[Tensor], owns: bool) -> Result<()>;

    /// The dtype the unit computes in, to which its own module's floating
    /// inputs are cast (FSDP2's `cast_forward_inputs`); `None`: as they
    /// come.
    fn input_kind(&self) -> Option<tch::Kind> {
        None
    }

    /// The unit's own module is about to run forward on inputs of which
    /// some (`requires_grad`) or none require a gradient.
    fn note_inputs(&self, _requires_grad: bool) {}
}

/// Tells `hook` whether any of `inputs` requires a gradient, under grad
/// mode only (FSDP2 reduces a unit in backward only then).
pub(crate) fn note_inputs<'a>(hook: &dyn ShardHook, inputs: impl IntoIterator<Item = &'a Tensor>) {
    if crate::tensor::runtime::grad_enabled() {
        hook.note_inputs(inputs.into_iter().any(|t| t.defined() && t.requires_grad()));
    }
}

/// A module's link to its unit.
#[derive(Debug, Clone)]
pub(crate) struct ShardLink {
    /// The unit.
    pub hook: Arc<dyn ShardHook>,
    /// Whether this module is the unit's own (not a descendant of it),
    /// the root unit's excepted (its parameters stay gathered).
    pub owns: bool,
    /// Whether this module is the one the unit was made of, the root's
    /// included: its inputs are cast to the unit's compute dtype.
    pub unit_module: bool,
}

impl Module {
    /// Runs `forward` between the unit's hooks when the module has one.
    pub(crate) fn sharded<R>(
        &self,
        outputs: impl Fn(&R) -> Vec<Tensor>,
        forward: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let Some(link) = &self.shard else { return forward() };
        link.hook.before_forward()?;
        let out = forward()?;
        link.hook.after_forward(&outputs(&out), link.owns)?;
        Ok(out)
    }

    /// `x` cast to the compute dtype of the unit this module is the own
    /// module of, when it is a floating tensor of another dtype; `None`
    /// when it runs as it comes.
    pub(crate) fn unit_input(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let Some(kind) = self.shard.as_ref().filter(|l| l.unit_module).and_then(|l| l.hook.input_kind()) else {
            return Ok(None);
        };
        if !x.defined() || !crate::tensor::dtype::is_floating(x.kind()) || x.kind() == kind {
            return Ok(None);
        }
        Ok(Some(x.f_to_kind(kind)?))
    }

    /// Tells the unit this module is the own module of whether any of
    /// `inputs` requires a gradient under grad mode (FSDP2 reduces a unit
    /// in backward only then).
    pub(crate) fn note_unit_inputs<'a>(&self, inputs: impl IntoIterator<Item = &'a Tensor>) {
        // The link first: every module's forward passes here, and only a
        // unit's own module asks libtorch for the grad mode.
        let Some(link) = self.shard.as_ref().filter(|l| l.unit_module) else { return };
        note_inputs(link.hook.as_ref(), inputs);
    }

    /// The direct children with their names (none for a leaf).
    pub(crate) fn child_modules(&self) -> &[(String, Module)] {
        match &self.node {
            Node::Sequential(c) | Node::Named(c) => c,
            _ => &[],
        }
    }

    /// The direct children, to change.
    pub(crate) fn child_modules_mut(&mut self) -> &mut [(String, Module)] {
        match &mut self.node {
            Node::Sequential(c) | Node::Named(c) => c,
            _ => &mut [],
        }
    }

    /// Whether this module or one below it is linked to a sharding unit.
    pub(crate) fn is_linked_to_shards(&self) -> bool {
        self.shard.is_some() || self.child_modules().iter().any(|(_, c)| c.is_linked_to_shards())
    }

    /// Links this module to a unit (`None` removes the link).
    pub(crate) fn set_shard_link(&mut self, link: Option<ShardLink>) {
        self.shard = link;
    }

    /// The module tree inside an exported program (`None` for other
    /// modules), which units may be made of.
    pub(crate) fn inner_modules(&self) -> Option<ModuleTree> {
        match &self.node {
            Node::Exported(e) => Some(e.module_tree()),
            _ => None,
        }
    }

    /// The exported program's state (name, tensor, is a buffer); empty for
    /// other modules.
    pub(crate) fn inner_state(&self) -> Vec<(String, Tensor, bool)> {
        match &self.node {
            Node::Exported(e) => e.state().map(|(n, t, b)| (n.to_owned(), t.shallow_clone(), b)).collect(),
            _ => Vec::new(),
        }
    }

    /// Makes `units` the sharding units inside an exported program,
    /// computing on `device` (none removes them); other modules have no
    /// inside.
    pub(crate) fn set_inner_units(&mut self, units: Vec<InnerUnit>, device: Option<crate::tensor::device::Device>) {
        if let Node::Exported(e) = &mut self.node {
            e.set_inner_units(units, device);
        }
    }

    /// Whether this module is an exported program.
    pub(crate) fn is_exported(&self) -> bool {
        matches!(self.node, Node::Exported(_))
    }
}
