//! Freezing and unfreezing part of a model, as Lightning's
//! `BaseFinetuning` does: over the "flattened" modules of a subtree (its
//! leaves and the containers with parameters of their own), each module's
//! own parameters get `requires_grad` on or off, and a BatchNorm's
//! `track_running_stats` follows.
use super::module::{Module, Node, Slot};
use crate::error::Result;
use tch::Tensor;

impl Module {
    /// Calls `f` on each module Lightning's `flatten_modules` keeps among
    /// this one and its descendants, parents first (`nn.Module.modules()`
    /// order), with its dotted path.
    pub(super) fn walk_flat_mut(
        &mut self,
        path: &str,
        f: &mut dyn FnMut(&str, &mut Module) -> Result<()>,
    ) -> Result<()> {
        if self.is_flat() {
            f(path, self)?;
        }
        if let Node::Sequential(c) | Node::Named(c) = &mut self.node {
            for (name, m) in c.iter_mut() {
                let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                m.walk_flat_mut(&child, f)?;
            }
        }
        Ok(())
    }

    /// Whether Lightning's `flatten_modules` keeps this module: a leaf, or
    /// a container with parameters of its own.
    fn is_flat(&self) -> bool {
        match &self.node {
            Node::Sequential(c) | Node::Named(c) => c.is_empty() || self.own.iter().any(|(_, _, s)| *s == Slot::Param),
            _ => true,
        }
    }

    /// Whether this module is one of torch's `_BatchNorm`s.
    pub(super) fn is_batch_norm(&self) -> bool {
        matches!(&self.node, Node::Layer(l) if l.type_name() == "BatchNorm")
    }

    /// Sets a BatchNorm's `track_running_stats`; false for other modules.
    fn set_tracking(&mut self, on: bool) -> bool {
        match &mut self.node {
            Node::Layer(l) => l.set_track_running_stats(on),
            _ => false,
        }
    }

    /// This module's own parameters (not its children's), named.
    fn own_params(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit_direct(&mut |n, t, slot| {
            if slot == Slot::Param {
                out.push((n.to_string(), t.shallow_clone()));
            }
        });
        out
    }

    /// Lightning's `BaseFinetuning.freeze` of the subtree at `path`: a
    /// BatchNorm stays trainable (and tracking) when `train_bn`; every
    /// other module's parameters stop requiring grad, and a BatchNorm that
    /// is not trained stops tracking its running statistics.
    pub(crate) fn freeze(&mut self, path: &str, train_bn: bool) -> Result<()> {
        self.child_mut(path)?.walk_flat_mut("", &mut |_, m| {
            // A BatchNorm tracks exactly when it trains; others have no flag.
            let grad = m.set_tracking(train_bn) && train_bn;
            for (_, p) in m.own_params() {
                let _ = p.f_set_requires_grad(grad)?;
            }
            Ok(())
        })
    }

    /// Lightning's `BaseFinetuning.make_trainable` of the subtree at
    /// `path`: every parameter requires grad and every BatchNorm tracks.
    pub(crate) fn make_trainable(&mut self, path: &str) -> Result<()> {
        self.child_mut(path)?.walk_flat_mut("", &mut |_, m| {
            m.set_tracking(true);
            for (_, p) in m.own_params() {
                let _ = p.f_set_requires_grad(true)?;
            }
            Ok(())
        })
    }

    /// Lightning's `BaseFinetuning.filter_params(requires_grad=True)` of
    /// the subtree at `path`: its parameters that require grad, BatchNorms'
    /// left out unless `train_bn`, with their full names, in
    /// `named_parameters` order.
    pub(crate) fn trainable_params_under(&mut self, path: &str, train_bn: bool) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        self.child_mut(path)?.walk_flat_mut(path, &mut |at, m| {
            if m.is_batch_norm() && !train_bn {
                return Ok(());
            }
            for (n, p) in m.own_params() {
                if p.requires_grad() {
                    out.push((if at.is_empty() { n } else { format!("{at}.{n}") }, p));
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}
