//! Prefetching (torch FSDP's `forward_prefetch` and `backward_prefetch`):
//! the all-gather of the unit that runs next is started while the current
//! one computes, so communication overlaps computation.
//!
//! The units record the order their forwards begin in, pass by pass. In a
//! forward (with `forward` on), a unit that gathered starts the gather of
//! the unit that followed it in the previous pass; in backward (with
//! `backward` on, the default as in torch), a unit's pre-backward hook
//! starts the gather of the unit that ran before it in this pass, whose
//! backward comes next. Every rank runs the same units in the same order,
//! so every rank starts the same collectives in the same order.
//!
//! A prefetched gather is taken by the unit's next gather; one left over
//! (the pass took another path) is waited for and dropped at the next
//! batch, at the step ([`UnitOrder::begin_pass`]'s callers), or when the
//! shards changed since it started.
use super::unit::FsdpUnit;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The order the units' forwards run in, shared by a model's units.
#[derive(Debug, Default)]
pub(crate) struct UnitOrder {
    /// Whether a forward gathers the next unit ahead.
    forward: bool,
    /// Whether a backward gathers the next unit ahead.
    backward: bool,
    /// The model's units, by index (set once they are all made).
    units: OnceLock<Vec<Weak<FsdpUnit>>>,
    state: Mutex<OrderState>,
}

#[derive(Debug, Default)]
struct OrderState {
    /// Forwards may start gathers (not during a backward's recomputation
    /// of checkpointed units).
    in_forward: bool,
    /// The units whose forward began in this pass, in order.
    current: Vec<usize>,
    /// The same for the last pass.
    previous: Vec<usize>,
}

impl UnitOrder {
    /// An order for units that prefetch in `forward` and in `backward`.
    pub(crate) fn new(forward: bool, backward: bool) -> Arc<Self> {
        Arc::new(UnitOrder { forward, backward, ..Default::default() })
    }

    /// Whether any prefetching is on.
    pub(crate) fn prefetches(&self) -> bool {
        self.forward || self.backward
    }

    /// Gives the order its units (by index), once.
    pub(crate) fn set_units(&self, units: &[Arc<FsdpUnit>]) {
        let _ = self.units.set(units.iter().map(Arc::downgrade).collect());
    }

    fn state(&self) -> std::sync::MutexGuard<'_, OrderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unit `index`, while the model holds it.
    pub(crate) fn unit(&self, index: usize) -> Option<Arc<FsdpUnit>> {
        self.units.get()?.get(index)?.upgrade()
    }

    /// A pass (a batch's forward and backward) begins: the order recorded
    /// so far becomes the previous pass's.
    pub(crate) fn begin_pass(&self) {
        let mut st = self.state();
        st.in_forward = true;
        if !st.current.is_empty() {
            st.previous = std::mem::take(&mut st.current);
        }
    }

    /// Unit `index` gathered for its forward: records it, and returns the
    /// unit to gather ahead (the one after it in the last pass).
    pub(crate) fn forward_began(&self, index: usize) -> Option<usize> {
        let mut st = self.state();
        if !st.in_forward {
            return None;
        }
        if !st.current.contains(&index) {
            st.current.push(index);
        }
        if !self.forward {
            return None;
        }
        let at = st.previous.iter().position(|i| *i == index)?;
        st.previous.get(at + 1).copied()
    }

    /// Unit `index` gathered for its backward: returns the unit to gather
    /// ahead (the one before it in this pass's forward).
    pub(crate) fn backward_began(&self, index: usize) -> Option<usize> {
        let mut st = self.state();
        st.in_forward = false;
        if !self.backward {
            return None;
        }
        let order = if st.current.is_empty() { &st.previous } else { &st.current };
        let at = order.iter().position(|i| *i == index)?;
        order.get(at.checked_sub(1)?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_of_a_pass_predicts_the_next() {
        let order = UnitOrder::new(true, true);
        // The first pass has no order to go by; it is recorded.
        order.begin_pass();
        for i in [2, 0, 1] {
            assert_eq!(order.forward_began(i), None);
        }
        // Backward goes back through this pass's order.
        assert_eq!(order.backward_began(1), Some(0));
        assert_eq!(order.backward_began(0), Some(2));
        assert_eq!(order.backward_began(2), None);
        // A recomputation during backward records and prefetches nothing.
        assert_eq!(order.forward_began(3), None);
        assert_eq!(order.state().current, [2, 0, 1]);
        // The next pass's forwards follow the last pass.
        order.begin_pass();
        assert_eq!(order.forward_began(2), Some(0));
        assert_eq!(order.forward_began(2), Some(0));
        assert_eq!(order.forward_began(0), Some(1));
        assert_eq!(order.forward_began(1), None);
        assert_eq!(order.state().current, [2, 0, 1]);
        // Off: the order is still recorded, nothing is prefetched.
        let off = UnitOrder::new(false, false);
        off.begin_pass();
        off.forward_began(0);
        off.forward_began(1);
        assert_eq!(off.backward_began(1), None);
        off.begin_pass();
        assert_eq!(off.forward_began(0), None);
        assert!(!off.prefetches());
    }
}
