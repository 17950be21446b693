//! `fulmen_dataset` and `fulmen_loader`: in-memory and CSV datasets,
//! subsets, host-implemented data sources and iterators, and loaders.
use crate::data::{
    load_csv, split_every, CsvOptions, DataLoader, DataLoaderOptions, Dataset, Scaling, Subset, TensorDataset,
};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host, check_struct_size, HostLock, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, opt_str, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle, Shared};
use crate::ffi::data::batch::{check_batch, fulmen_batch_builder, with_temp_handle};
use crate::ffi::data::gen_options::{
    fulmen_csv_options, fulmen_csv_options_default, fulmen_loader_options, fulmen_loader_options_default,
};
use crate::ffi::tensor::handle::{emit, fulmen_tensor, i64_list, slice_arg, tensor_list};
use crate::trainer::{BatchIter, BatchSource};
use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;
use tch::Tensor;

/// A map-style dataset: samples addressed by index, handed out as batches.
pub struct fulmen_dataset {
    pub(crate) inner: Arc<dyn Dataset>,
}

impl Handle for fulmen_dataset {
    const C_NAME: &'static str = "fulmen_dataset";
}

/// Something the trainer draws batches from: a loader over a dataset, or a
/// host iterator.
pub struct fulmen_loader {
    pub(crate) inner: Box<dyn BatchSource + Send>,
}

impl Handle for fulmen_loader {
    const C_NAME: &'static str = "fulmen_loader";
}

pub(crate) unsafe fn emit_dataset(out: *mut *mut fulmen_dataset, ds: Arc<dyn Dataset>) -> Result<()> {
    check_out(out, "out")?;
    out.write(handle::into_raw(fulmen_dataset { inner: ds }));
    Ok(())
}

pub(crate) unsafe fn dataset_arg<'a>(p: *const fulmen_dataset, arg: &str) -> Result<Shared<'a, Arc<dyn Dataset>>> {
    Ok(handle::borrow(p, arg)?.map(|h| &h.inner))
}

/// Creates a dataset from `tensors[0..n]` that share their first dimension
/// (sample i is row i of each). The dataset shares the tensors' storage.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`n` is 0, or a tensor is undefined),
/// FULMEN_CODE_SHAPE_MISMATCH (a 0-dim tensor, or first dimensions that
/// differ).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_from_tensors(
    tensors: *const *const fulmen_tensor,
    n: usize,
    out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let list: Vec<Tensor> = tensor_list(tensors, n, "tensors")?.into_iter().map(|t| t.shallow_clone()).collect();
        emit_dataset(out, Arc::new(TensorDataset::new(list)?))
    })
}

/// How CSV features are scaled (`fulmen_scaling`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvScaling {
    /// Values as read.
    None = 0,
    /// Divided by `scale_divisor` (255 for pixels).
    Divide = 1,
    /// Per column to [0, 1] by the column's min and max.
    MinMax = 2,
    /// Per column to zero mean and unit variance.
    Standardize = 3,
}

/// # Safety
/// `o`'s strings must be NULL or NUL-terminated.
unsafe fn csv_options(o: &fulmen_csv_options) -> Result<CsvOptions> {
    let has_header = match o.header {
        -1 => None,
        0 => Some(false),
        1 => Some(true),
        h => return Err(Error::invalid(format!("csv header must be -1, 0 or 1, got {h}"))),
    };
    let scaling = match o.scaling {
        0 => Scaling::None,
        1 => Scaling::Divide(o.scale_divisor),
        2 => Scaling::MinMax,
        3 => Scaling::Standardize,
        s => return Err(Error::invalid(format!("{s} is not a fulmen_scaling (0..=3)"))),
    };
    let label_name = opt_str(o.label_name, "label_name")?;
    if label_name.is_some() && !o.has_labels {
        return Err(Error::invalid("csv label_name is set but has_labels is false"));
    }
    let feature_columns = opt_str(o.feature_columns, "feature_columns")?
        .map(|list| list.split(',').map(|c| c.trim().to_string()).collect::<Vec<_>>());
    if feature_columns.as_ref().is_some_and(|c| c.iter().any(String::is_empty)) {
        return Err(Error::invalid("csv feature_columns has an empty name (two commas, or a comma at an end)"));
    }
    Ok(CsvOptions {
        label_column: o.has_labels.then_some(o.label_column),
        has_header,
        delimiter: o.delimiter as u8,
        scaling,
        skip_rows: o.skip_rows,
        label_name,
        feature_columns,
    })
}

/// Loads a `.csv` or gzip-compressed `.csv.gz` file: features as f32
/// (N, F) and, with labels, class labels as i64 (N). Errors name the file
/// and line. `options` may be NULL for the defaults.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`path`, `label_name` or
/// `feature_columns` not UTF-8; `header` or `scaling` out of its values; a
/// zero or non-finite `scale_divisor`; a column name the header lacks, or
/// a name without a header; a feature column given twice or that is the
/// label),
/// FULMEN_CODE_IO (the file cannot be opened or read, or is not a regular
/// file: a device, a FIFO, a socket or a directory), FULMEN_CODE_FORMAT (a
/// ragged row, a non-numeric field or label, a corrupt gzip stream, no data
/// rows, a missing value, a data row wider or narrower than a header that
/// was asked for; each names the line and column), FULMEN_CODE_OUT_OF_RANGE
/// (`label_column` or a feature column index outside the columns).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_from_csv(
    path: *const c_char,
    options: *const fulmen_csv_options,
    out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let p = str_arg(path, "path")?;
        let o = options.as_ref().copied().unwrap_or_else(|| fulmen_csv_options_default());
        let ds = load_csv(Path::new(p), &csv_options(&o)?)?;
        emit_dataset(out, Arc::new(ds))
    })
}

/// Creates a dataset of the samples `indices[0..n]` of `dataset` (which it
/// keeps alive).
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (an index outside `dataset`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_subset(
    dataset: *const fulmen_dataset,
    indices: *const i64,
    n: usize,
    out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let ds = dataset_arg(dataset, "dataset")?.clone();
        let idx = i64_list(indices, n, "indices")?.to_vec();
        emit_dataset(out, Arc::new(Subset::new(ds, idx)?))
    })
}

/// Splits `dataset` at random into `n` parts of `lengths[0..n]` samples
/// (counts summing to its length, or fractions summing to 1: each part
/// gets `floor(len * f)` and the remainder goes one by one from the first),
/// with the permutation torch draws for `seed`: the same parts as
/// `torch.utils.data.random_split(dataset, lengths,
/// generator=torch.Generator().manual_seed(seed))`. The parts (new
/// datasets that keep `dataset` alive) go to `outs[0..n]`; `*count_out`
/// gets `n`, and when `capacity` is below it nothing else is made.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (no lengths or more than 65536, a
/// negative or non-finite length, counts that do not sum to the length, a
/// dataset above 2^31 samples), FULMEN_CODE_OUT_OF_RANGE (`capacity`
/// below `n`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_random_split(
    dataset: *const fulmen_dataset,
    lengths: *const f64,
    n: usize,
    seed: u64,
    outs: *mut *mut fulmen_dataset,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let ds = dataset_arg(dataset, "dataset")?.clone();
        if n > crate::data::MAX_SPLIT_PARTS {
            return Err(Error::invalid(format!(
                "random_split: {n} lengths are more than {}",
                crate::data::MAX_SPLIT_PARTS
            )));
        }
        let lengths = slice_arg(lengths, n, "lengths")?;
        if n > capacity {
            count_out.write(n);
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("random_split makes {n} datasets, `capacity` is {capacity}"),
            ));
        }
        check_out(outs, "outs")?;
        let parts = crate::data::random_split(ds, lengths, seed)?;
        for (i, part) in parts.into_iter().enumerate() {
            outs.add(i).write(handle::into_raw(fulmen_dataset { inner: Arc::new(part) }));
        }
        count_out.write(n);
        Ok(())
    })
}

/// Splits `dataset` into every `k`-th sample starting at `offset`
/// (`*every_out`) and the rest (`*rest_out`): with k = 5, a 20% holdout.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`k` is 0 or `offset` >= `k`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_split_every(
    dataset: *const fulmen_dataset,
    k: usize,
    offset: usize,
    every_out: *mut *mut fulmen_dataset,
    rest_out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(every_out, "every_out")?;
        check_out(rest_out, "rest_out")?;
        let ds = dataset_arg(dataset, "dataset")?.clone();
        if k == 0 || offset >= k {
            return Err(Error::invalid(format!("split_every needs k >= 1 and offset < k, got k={k} offset={offset}")));
        }
        let (every, rest) = split_every(ds.len(), k, offset);
        let a = Subset::new(ds.clone(), every)?;
        let b = Subset::new(ds, rest)?;
        emit_dataset(every_out, Arc::new(a))?;
        emit_dataset(rest_out, Arc::new(b))
    })
}

/// Writes the number of samples.
///
/// Errors: the common ones only.
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_len(dataset: *const fulmen_dataset, out: *mut usize) -> *mut fulmen_error {
    guard!(|| write_out(out, "out", dataset_arg(dataset, "dataset")?.len()))
}

/// Writes a batch's tensors as new handles to `tensors_out[0..capacity]`
/// and their count to `*count_out` (written even when `capacity` is too
/// small, which is FULMEN_CODE_OUT_OF_RANGE).
unsafe fn emit_batch(
    batch: Vec<Tensor>,
    tensors_out: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> Result<()> {
    count_out.write(batch.len());
    if batch.len() > capacity {
        return Err(Error::new(
            ErrorCode::OutOfRange,
            format!("the batch has {} tensors, `tensors_out` holds {capacity}", batch.len()),
        ));
    }
    check_out(tensors_out, "tensors_out")?;
    for (i, t) in batch.into_iter().enumerate() {
        emit(tensors_out.add(i), t)?;
    }
    Ok(())
}

/// Fetches the samples `indices[0..n]` as a batch: writes up to `capacity`
/// new tensor handles to `tensors_out` and their count to `*count_out`.
/// `*count_out` is written even when `capacity` is too small, which fails
/// with FULMEN_CODE_OUT_OF_RANGE.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (an index outside the dataset, or
/// `capacity` too small), FULMEN_CODE_TORCH (libtorch failed to gather the
/// rows); for a host data source also the code a host callback returned
/// (`get_batch`), FULMEN_CODE_INVALID_ARGUMENT (it pushed no tensor),
/// FULMEN_CODE_SHAPE_MISMATCH (a pushed tensor's first dimension is not `n`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_get(
    dataset: *const fulmen_dataset,
    indices: *const i64,
    n: usize,
    tensors_out: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let ds = dataset_arg(dataset, "dataset")?;
        let batch = ds.get_batch(i64_list(indices, n, "indices")?)?;
        emit_batch(batch, tensors_out, capacity, count_out)
    })
}

/// Frees a dataset handle (loaders and subsets built on it keep it alive;
/// freed while a call such as `fulmen_dataset_get` uses it, it goes when
/// that call returns).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_free(dataset: *mut fulmen_dataset) {
    handle::free(dataset);
}

/// A map-style dataset implemented by the host. Set `struct_size` to
/// `sizeof(fulmen_data_source_vtable)`. Callbacks run on the thread that
/// iterates the loader (the one that called fit / validate / ...), or with
/// `any_thread` on a loader's worker thread; never two at once.
#[repr(C)]
pub struct fulmen_data_source_vtable {
    /// `sizeof(fulmen_data_source_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when fulmen drops the dataset; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Writes the number of samples to `*len_out`. Required.
    pub len: Option<unsafe extern "C" fn(userdata: *mut c_void, len_out: *mut usize) -> *mut fulmen_error>,
    /// Pushes the batch of samples `indices[0..n]` (for example inputs,
    /// then targets, each with first dimension n) into `batch`. Tensors it
    /// creates are released after it returns. Required.
    pub get_batch: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            indices: *const i64,
            n: usize,
            batch: *mut fulmen_batch_builder,
        ) -> *mut fulmen_error,
    >,
    /// true: `get_batch` may run on a loader's worker threads
    /// (`num_workers` > 0), one call at a time, so reading overlaps
    /// training; false (default): loaders with workers refuse this dataset.
    /// A worker's call is bound by the running trainer's `callback_timeout`
    /// as a call on the loop's thread is. The batches equal those
    /// without workers when `get_batch` depends only on its indices; one
    /// that draws from torch's global generator (random augmentation) gets
    /// draws in an order that varies from run to run. (Appended: a vtable
    /// whose `struct_size` ends before it reads as false.)
    pub any_thread: bool,
}

struct HostDataset {
    userdata: HostLock<Userdata>,
    len: usize,
    any_thread: bool,
    get_batch: unsafe extern "C" fn(*mut c_void, *const i64, usize, *mut fulmen_batch_builder) -> *mut fulmen_error,
}

impl Dataset for HostDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn reads_on_any_thread(&self) -> bool {
        self.any_thread
    }

    fn get_batch(&self, indices: &[i64]) -> Result<Vec<Tensor>> {
        if let Some(bad) = indices.iter().find(|i| **i < 0 || **i as usize >= self.len) {
            return Err(Error::new(
                ErrorCode::OutOfRange,
                format!("index {bad} outside the host dataset of {} samples", self.len),
            ));
        }
        let ud = self.userdata.lock("the host dataset")?;
        let (builder, r) = with_temp_handle(fulmen_batch_builder { tensors: Vec::new() }, |b| {
            call_host("get_batch", || unsafe { (self.get_batch)(ud.ptr(), indices.as_ptr(), indices.len(), b) })
        });
        r?;
        check_batch(&builder.tensors, "get_batch")?;
        for (i, t) in builder.tensors.iter().enumerate() {
            if t.size().first().copied() != Some(indices.len() as i64) {
                return Err(Error::shape(format!(
                    "get_batch for {} samples pushed tensor {i} of shape {:?}: its first dimension must be {}",
                    indices.len(),
                    t.size(),
                    indices.len()
                )));
            }
        }
        Ok(builder.tensors)
    }
}

/// Creates a dataset whose samples the host provides through `vtable`
/// (copied; `len` is called once, now). On failure `userdata_free` is not
/// called: the host still owns its userdata.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`struct_size` too small, `len` or
/// `get_batch` NULL), the code a host callback returned (`len`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dataset_from_source(
    vtable: *const fulmen_data_source_vtable,
    out: *mut *mut fulmen_dataset,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        // The fields before `any_thread` are required; it was appended.
        let required = std::mem::offset_of!(fulmen_data_source_vtable, any_thread);
        let v = &crate::ffi::base::callback::read_vtable(vtable, required, "fulmen_data_source_vtable")?;
        let any_thread = v.any_thread;
        let len_fn = v.len.ok_or_else(|| Error::invalid("fulmen_data_source_vtable.len is NULL"))?;
        let get_batch = v.get_batch.ok_or_else(|| Error::invalid("fulmen_data_source_vtable.get_batch is NULL"))?;
        let mut len = 0usize;
        call_host("len", || len_fn(v.userdata, &mut len))?;
        let userdata = HostLock::new(Userdata::new(v.userdata, v.userdata_free));
        let ds = HostDataset { userdata, len, any_thread, get_batch };
        emit_dataset(out, Arc::new(ds))
    })
}

// SAFETY: the HostLock serialises the callbacks; they run on the loop's
// thread, or, when the host set `any_thread`, on a loader worker thread.
unsafe impl Sync for HostDataset {}

unsafe fn emit_loader(out: *mut *mut fulmen_loader, inner: Box<dyn BatchSource + Send>) -> Result<()> {
    check_out(out, "out")?;
    out.write(handle::into_raw(fulmen_loader { inner }));
    Ok(())
}

/// Creates a loader that batches `dataset` (kept alive by the loader).
/// `options` may be NULL for the defaults.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`batch_size` 0 or above 2^24,
/// `num_workers` above 64, `prefetch_factor` outside 1..=64, workers over a
/// host dataset without `any_thread`).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_new(
    dataset: *const fulmen_dataset,
    options: *const fulmen_loader_options,
    out: *mut *mut fulmen_loader,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let ds = dataset_arg(dataset, "dataset")?.clone();
        let opts =
            DataLoaderOptions::from(options.as_ref().copied().unwrap_or_else(|| fulmen_loader_options_default()));
        emit_loader(out, Box::new(DataLoader::new(ds, opts)?))
    })
}

/// Writes the number of batches per epoch; FULMEN_CODE_UNSUPPORTED for an
/// iterator whose length the host did not give.
///
/// Errors: FULMEN_CODE_UNSUPPORTED (an iterator of unknown length, see above).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_len(loader: *const fulmen_loader, out: *mut usize) -> *mut fulmen_error {
    guard!(|| {
        let n = handle::borrow(loader, "loader")?.inner.num_batches();
        write_out(
            out,
            "out",
            n.ok_or_else(|| Error::new(ErrorCode::Unsupported, "this loader does not know its length"))?,
        )
    })
}

/// Frees a loader. NULL or an already freed handle is a no-op. Freeing a
/// loader a call (a fit) is using returns at once; the loader goes when
/// that call returns.
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_free(loader: *mut fulmen_loader) {
    handle::free(loader);
}

/// An iterable data source implemented by the host (like a PyTorch
/// IterableDataset). Set `struct_size` to `sizeof(fulmen_iterator_vtable)`.
#[repr(C)]
pub struct fulmen_iterator_vtable {
    /// `sizeof(fulmen_iterator_vtable)`.
    pub struct_size: usize,
    /// Passed to every callback.
    pub userdata: *mut c_void,
    /// Called once when fulmen drops the loader; may be NULL.
    pub userdata_free: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Starts epoch `epoch` from the beginning. May be NULL.
    pub reset: Option<unsafe extern "C" fn(userdata: *mut c_void, epoch: u64) -> *mut fulmen_error>,
    /// Pushes the next batch into `batch`, or sets `*done` to true at the
    /// end of the epoch (pushing nothing). Required.
    pub next: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            batch: *mut fulmen_batch_builder,
            done: *mut bool,
        ) -> *mut fulmen_error,
    >,
    /// Batches per epoch if known, or -1. Used for progress and limits.
    pub num_batches: i64,
}

struct HostIterator {
    // Serialises the host's callbacks (a loader shared by two runs).
    userdata: HostLock<Userdata>,
    reset: Option<unsafe extern "C" fn(*mut c_void, u64) -> *mut fulmen_error>,
    next: unsafe extern "C" fn(*mut c_void, *mut fulmen_batch_builder, *mut bool) -> *mut fulmen_error,
    num_batches: Option<usize>,
}

impl HostIterator {
    fn next_batch(&self) -> Result<Option<Vec<Tensor>>> {
        let mut done = false;
        let ud = self.userdata.lock("the host iterator")?;
        let (builder, r) = with_temp_handle(fulmen_batch_builder { tensors: Vec::new() }, |b| {
            call_host("next", || unsafe { (self.next)(ud.ptr(), b, &mut done) })
        });
        drop(ud);
        r?;
        if done {
            return Ok(None);
        }
        check_batch(&builder.tensors, "next")?;
        Ok(Some(builder.tensors))
    }
}

impl BatchSource for HostIterator {
    fn num_batches(&self) -> Option<usize> {
        self.num_batches
    }

    fn batches(&self, epoch: u64) -> Result<BatchIter<'_>> {
        if let Some(reset) = self.reset {
            let ud = self.userdata.lock("the host iterator")?;
            call_host("reset", || unsafe { reset(ud.ptr(), epoch) })?;
        }
        let mut finished = false;
        Ok(Box::new(std::iter::from_fn(move || {
            if finished {
                return None;
            }
            match self.next_batch() {
                Ok(Some(b)) => Some(Ok(b)),
                Ok(None) => {
                    finished = true;
                    None
                }
                Err(e) => {
                    finished = true;
                    Some(Err(e))
                }
            }
        })))
    }
}

/// Fetches batch `index` of `epoch` (the order `fit` would use: shuffled
/// with the loader's seed and the epoch, and this rank's share for a
/// sharded loader), for a host-owned loop: writes up to `capacity` new
/// tensor handles to `tensors_out` and their count to `*count_out` as
/// `fulmen_dataset_get` does. An index past the epoch is
/// FULMEN_CODE_OUT_OF_RANGE; a host iterator is FULMEN_CODE_UNSUPPORTED.
///
/// Errors: FULMEN_CODE_OUT_OF_RANGE (`index` past the epoch, or `capacity` too
/// small), FULMEN_CODE_UNSUPPORTED (a host iterator), and the errors of
/// `fulmen_dataset_get` for the loader's dataset (FULMEN_CODE_TORCH; for a host
/// data source the code a host callback returned, FULMEN_CODE_INVALID_ARGUMENT
/// or FULMEN_CODE_SHAPE_MISMATCH).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_batch(
    loader: *const fulmen_loader,
    epoch: u64,
    index: usize,
    tensors_out: *mut *mut fulmen_tensor,
    capacity: usize,
    count_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(count_out, "count_out")?;
        let l = handle::borrow(loader, "loader")?;
        let batch = l.inner.batch_at(epoch, index)?;
        emit_batch(batch, tensors_out, capacity, count_out)
    })
}

/// Creates a loader that pulls batches from a host iterator (`vtable` is
/// copied). On failure `userdata_free` is not called.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`struct_size` too small, `next` NULL,
/// `num_batches` < -1).
#[no_mangle]
pub unsafe extern "C" fn fulmen_loader_from_iterator(
    vtable: *const fulmen_iterator_vtable,
    out: *mut *mut fulmen_loader,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let v = vtable.as_ref().ok_or_else(|| Error::new(ErrorCode::NullArgument, "argument `vtable` is NULL"))?;
        check_struct_size(v.struct_size, std::mem::size_of::<fulmen_iterator_vtable>(), "fulmen_iterator_vtable")?;
        let next = v.next.ok_or_else(|| Error::invalid("fulmen_iterator_vtable.next is NULL"))?;
        if v.num_batches < -1 {
            return Err(Error::invalid(format!("num_batches must be -1 (unknown) or >= 0, got {}", v.num_batches)));
        }
        let it = HostIterator {
            userdata: HostLock::new(Userdata::new(v.userdata, v.userdata_free)),
            reset: v.reset,
            next,
            num_batches: usize::try_from(v.num_batches).ok(),
        };
        emit_loader(out, Box::new(it))
    })
}
