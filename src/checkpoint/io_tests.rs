use super::*;
use std::collections::HashMap;
use std::sync::Mutex;
use tch::Tensor;

/// A store keeping checkpoints in memory; `fail_save` makes saves fail.
#[derive(Default)]
struct Memory {
    files: Mutex<HashMap<PathBuf, Vec<u8>>>,
    fail_save: bool,
    removed: Mutex<Vec<PathBuf>>,
}

impl CheckpointIo for Memory {
    fn save(&self, bytes: &[u8], path: &Path) -> Result<()> {
        if self.fail_save {
            return Err(Error::io("the store is full"));
        }
        self.files.lock().unwrap().insert(path.to_path_buf(), bytes.to_vec());
        Ok(())
    }

    fn load(&self, path: &Path) -> Result<Vec<u8>> {
        self.files
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .ok_or_else(|| Error::io(format!("{} is not stored", path.display())))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.removed.lock().unwrap().push(path.to_path_buf());
        self.files.lock().unwrap().remove(path);
        Ok(())
    }
}

fn sample() -> Checkpoint {
    Checkpoint {
        epoch: 3,
        global_step: 7,
        state_dict: vec![("w".to_string(), Tensor::from_slice(&[1.0f32, 2.0, 3.0]))],
        optimizer_states: vec![Vec::new()],
        rng_state: Some(Tensor::from_slice(&[1u8, 2])),
        ..Default::default()
    }
}

/// Checkpoints go to the store as bytes and read back from it, nothing
/// written locally; removal reaches the store. (Lightning's format goes
/// the same way: the C tests fit and resume through a store with it.)
#[test]
fn plugin_round_trips() {
    let memory = Arc::new(Memory::default());
    let mut w = CheckpointWriter::new(Some(memory.clone() as Arc<dyn CheckpointIo>), false);
    for name in ["a.ckpt", "b.ckpt"] {
        let path = Path::new("/nonexistent-store").join(name);
        w.save(&sample(), &path, CheckpointFormat::Safetensors, "").unwrap();
        assert!(!path.exists(), "{name} was written locally");
        let back = w.load(&path).unwrap();
        assert_eq!((back.epoch, back.global_step), (3, 7), "{name}");
        assert_eq!(back.state_dict[0].1, Tensor::from_slice(&[1.0f32, 2.0, 3.0]));
        let weights = w.load_weights(&path).unwrap();
        assert_eq!(weights.state_dict.len(), 1, "{name}");
        w.remove(&path).unwrap();
    }
    assert_eq!(memory.removed.lock().unwrap().len(), 2);
    assert!(memory.files.lock().unwrap().is_empty());
}

/// A failing asynchronous save is reported by the next save (which is not
/// made) and by the end of the run.
#[test]
fn async_save_error_surfaces_at_next_save_and_finish() {
    let memory = Arc::new(Memory { fail_save: true, ..Default::default() });
    let mut w = CheckpointWriter::new(Some(memory.clone() as Arc<dyn CheckpointIo>), true);
    let path = Path::new("/nonexistent-store/a.ckpt");
    w.save(&sample(), path, CheckpointFormat::Safetensors, "").unwrap();
    let e = w.save(&sample(), path, CheckpointFormat::Safetensors, "").unwrap_err();
    assert_eq!(e.code, ErrorCode::Io, "{}", e.message);
    assert!(e.message.contains("background") && e.message.contains("the store is full"), "{}", e.message);
    w.save(&sample(), path, CheckpointFormat::Safetensors, "").unwrap();
    let e = w.finish(Ok(())).unwrap_err();
    assert!(e.message.contains("the store is full"), "{}", e.message);
    // The run's own error stays first.
    w.save(&sample(), path, CheckpointFormat::Safetensors, "").unwrap();
    let e = w.finish(Err(Error::state("the step failed"))).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.starts_with("the step failed") && e.message.contains("the store is full"), "{}", e.message);
}

/// The asynchronous mode over local files writes the same checkpoint.
#[test]
fn async_local_files_write_a_loadable_checkpoint() {
    let dir = crate::test_dirs::TempDir::new("ckpt-async");
    let path = dir.join("sub").join("a.ckpt");
    let mut w = CheckpointWriter::new(None, true);
    w.save(&sample(), &path, CheckpointFormat::Safetensors, "").unwrap();
    w.finish(Ok(())).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap().global_step, 7);
    w.remove(&path).unwrap();
    assert!(!path.exists());
}
