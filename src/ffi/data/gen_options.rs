//! Generated from src/ffi/options_table.rs by tools/codegen/option_structs.rs (`make header`): do not edit.
//! The option structs of `fulmen/data.h`, each with its `*_default`
//! functions and, where the core has an options type for it, its
//! conversions to and from the core's options.
use crate::data::DataLoaderOptions;
use std::ffi::c_char;

/// Options of `fulmen_dataset_from_csv`; defaults from
/// `fulmen_csv_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_csv_options {
    /// Whether a column holds integer class labels (default true).
    pub has_labels: bool,
    /// The label column; negative counts from the end (default 0).
    pub label_column: i64,
    /// 1: the first row is a header, 0: it is not, -1: detect (default).
    pub header: i32,
    /// Field separator (default ',').
    pub delimiter: c_char,
    /// A `fulmen_scaling` (default none).
    pub scaling: i32,
    /// Divisor for FULMEN_SCALING_DIVIDE (default 1).
    pub scale_divisor: f64,
    /// Lines skipped before anything is read, such as the count line that
    /// starts scikit-learn's CSVs (default 0).
    pub skip_rows: usize,
    /// The label column by its header name, instead of `label_column`
    /// (default NULL; borrowed for the call).
    pub label_name: *const c_char,
    /// The feature columns, by header name or 0-based index, comma
    /// separated, in the order they are read ("age,income" or "2,0");
    /// default NULL: every column but the label. Borrowed for the call.
    pub feature_columns: *const c_char,
}

/// Default CSV options: labels in column 0, header detected, ',', no scaling.
#[no_mangle]
pub extern "C" fn fulmen_csv_options_default() -> fulmen_csv_options {
    fulmen_csv_options {
        has_labels: true,
        label_column: 0,
        header: -1,
        delimiter: b',' as c_char,
        scaling: 0,
        scale_divisor: 1.0,
        skip_rows: 0,
        label_name: std::ptr::null(),
        feature_columns: std::ptr::null(),
    }
}

/// Options of a loader; defaults from `fulmen_loader_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fulmen_loader_options {
    /// Samples per batch (default 1).
    pub batch_size: usize,
    /// Reshuffle every epoch (default false).
    pub shuffle: bool,
    /// Seed of the shuffle; the order depends only on (seed, epoch).
    pub seed: u64,
    /// Drop the last incomplete batch (default false).
    pub drop_last: bool,
    /// Copy each batch into pinned host memory, so that its copy to a GPU
    /// overlaps (torch's `pin_memory`; default false). Without CUDA it does
    /// nothing, as torch's DataLoader then does.
    pub pin_memory: bool,
    /// Worker threads that read batches ahead of the loop, in the loader's
    /// order, so reading overlaps training (torch's `num_workers`; default
    /// 0: the loop's thread reads them; at most 64). A host dataset needs
    /// `any_thread` in its vtable.
    pub num_workers: usize,
    /// Batches each worker reads ahead (torch's `prefetch_factor`; default
    /// 2, 1 to 64).
    pub prefetch_factor: usize,
}

/// torch's DataLoader defaults (batch size 1, no shuffle, no workers).
#[no_mangle]
pub extern "C" fn fulmen_loader_options_default() -> fulmen_loader_options {
    DataLoaderOptions::default().into()
}

impl From<DataLoaderOptions> for fulmen_loader_options {
    fn from(d: DataLoaderOptions) -> Self {
        fulmen_loader_options {
            batch_size: d.batch_size,
            shuffle: d.shuffle,
            seed: d.seed,
            drop_last: d.drop_last,
            pin_memory: d.pin_memory,
            num_workers: d.num_workers,
            prefetch_factor: d.prefetch_factor,
        }
    }
}

impl From<fulmen_loader_options> for DataLoaderOptions {
    fn from(o: fulmen_loader_options) -> Self {
        DataLoaderOptions {
            batch_size: o.batch_size,
            shuffle: o.shuffle,
            seed: o.seed,
            drop_last: o.drop_last,
            pin_memory: o.pin_memory,
            num_workers: o.num_workers,
            prefetch_factor: o.prefetch_factor,
        }
    }
}
