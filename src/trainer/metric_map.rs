//! Metrics by name whose latest values are numbers, or device tensors
//! logged per step and not read yet: a step that logs a device value does
//! not wait for its device, and the values are read together (one copy
//! per device) where the trainer or a callback reads numbers anyway.
use super::device_metrics::{self, DeviceValue};
use crate::error::Result;
use std::collections::BTreeMap;
use std::ops::Deref;
use tch::Tensor;

/// Latest value of each metric. Reads through `Deref` see the numbers
/// only: [`MetricMap::settle`] first reads the pending tensors.
#[derive(Debug, Default, Clone)]
pub struct MetricMap {
    values: BTreeMap<String, f64>,
    /// Names whose latest value is a device tensor not read yet (absent
    /// from `values`).
    pending: BTreeMap<String, DeviceValue>,
}

impl Deref for MetricMap {
    type Target = BTreeMap<String, f64>;

    /// The numbers (pending tensors not included).
    fn deref(&self) -> &Self::Target {
        &self.values
    }
}

impl From<BTreeMap<String, f64>> for MetricMap {
    /// Numbers only.
    fn from(values: BTreeMap<String, f64>) -> Self {
        MetricMap { values, pending: BTreeMap::new() }
    }
}

impl MetricMap {
    /// Sets `name` to a number.
    pub fn insert(&mut self, name: String, value: f64) {
        self.pending.remove(&name);
        self.values.insert(name, value);
    }

    /// Sets `name` to a 0-dim device tensor (from
    /// [`device_metrics::as_logged`]), read at the next settle.
    pub(crate) fn insert_pending(&mut self, name: String, value: &Tensor) {
        self.values.remove(&name);
        self.pending.insert(name, DeviceValue(value.shallow_clone()));
    }

    /// Takes every value of `other`, numbers and pending tensors (the
    /// tensors are shared, not read).
    pub fn extend_from(&mut self, other: &MetricMap) {
        for (k, v) in &other.values {
            self.insert(k.clone(), *v);
        }
        for (k, v) in &other.pending {
            self.insert_pending(k.clone(), &v.0);
        }
    }

    /// Takes the numbers of `values`.
    pub fn extend_values<I: IntoIterator<Item = (String, f64)>>(&mut self, values: I) {
        for (k, v) in values {
            self.insert(k, v);
        }
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &str) -> Option<f64> {
        self.pending.remove(name);
        self.values.remove(name)
    }

    /// Keeps the names `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.values.retain(|k, _| keep(k));
        self.pending.retain(|k, _| keep(k));
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.values.clear();
        self.pending.clear();
    }

    /// Whether a name holds a value, read or not.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name) || self.pending.contains_key(name)
    }

    /// Whether nothing is pending.
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// Reads the pending tensors (one copy per device; nothing when none
    /// is pending): afterwards every value is a number.
    pub fn settle(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let read = {
            let tensors: Vec<&Tensor> = self.pending.values().map(|d| &d.0).collect();
            device_metrics::read_all(&tensors)?
        };
        let names: Vec<String> = std::mem::take(&mut self.pending).into_keys().collect();
        self.values.extend(names.into_iter().zip(read));
        Ok(())
    }

    /// The value of `name`, reading it from its device when pending
    /// (without keeping the number: for readers that cannot settle).
    pub fn read(&self, name: &str) -> Result<Option<f64>> {
        match self.pending.get(name) {
            Some(d) => Ok(Some(d.0.f_double_value(&[])?)),
            None => Ok(self.values.get(name).copied()),
        }
    }

    /// Every value as a number, the pending ones read (one copy per
    /// device) but not kept: for readers that cannot settle.
    pub fn snapshot(&self) -> Result<BTreeMap<String, f64>> {
        let mut copy = self.clone();
        copy.settle()?;
        Ok(copy.values)
    }

    /// Every name, read or not, in order.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.values.keys().chain(self.pending.keys()).map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_value_wins_and_settling_reads_the_tensors() {
        let mut m = MetricMap::default();
        m.insert("a".into(), 1.0);
        m.insert_pending("a".into(), &Tensor::from(2.0f64));
        m.insert_pending("b".into(), &Tensor::from(3.0f64));
        m.insert("b".into(), 4.0);
        m.insert_pending("c".into(), &Tensor::from(5.0f64));
        assert_eq!(m.get("a"), None);
        assert!(m.has("a") && !m.is_settled());
        assert_eq!(m.read("a").unwrap(), Some(2.0));
        assert_eq!(m.names(), vec!["a", "b", "c"]);
        let mut copy = MetricMap::default();
        copy.extend_from(&m);
        m.settle().unwrap();
        assert!(m.is_settled());
        assert_eq!((m["a"], m["b"], m["c"]), (2.0, 4.0, 5.0));
        copy.retain(|k| k != "c");
        copy.settle().unwrap();
        assert_eq!(copy.names(), vec!["a", "b"]);
        assert_eq!(copy.remove("a"), Some(2.0));
    }
}
