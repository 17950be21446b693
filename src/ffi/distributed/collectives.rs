//! A custom accelerator's collectives hook (`fulmen_collectives`): DDP on
//! its devices through the vendor's own communication library, and the
//! key-value store (`fulmen_dist_store`) its ranks meet through.
use crate::distributed::{CommGroup, DeviceCollectives, KeyStore, ReduceOp};
use crate::error::{Error, ErrorCode, Result};
use crate::ffi::base::callback::{call_host_untimed, read_vtable, HostLock, Userdata};
use crate::ffi::base::error::{fulmen_error, guard, str_arg};
use crate::ffi::base::handle::{self, check_out, write_out, Handle};
use crate::ffi::devices::accelerator::fulmen_device;
use crate::ffi::tensor::{fulmen_tensor, new_handle, TensorScope};
use crate::tensor::device::Device;
use crate::tensor::DeviceSpec;
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;
use tch::Tensor;

/// A reduction of `fulmen_collectives.all_reduce` (`fulmen_reduce_op`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOpCode {
    /// Element-wise sum over the ranks.
    Sum = 0,
    /// Element-wise product.
    Product = 1,
    /// Element-wise minimum.
    Min = 2,
    /// Element-wise maximum.
    Max = 3,
}

impl ReduceOpCode {
    fn of(op: ReduceOp) -> Result<Self> {
        Ok(match op {
            ReduceOp::Sum => ReduceOpCode::Sum,
            ReduceOp::Product => ReduceOpCode::Product,
            ReduceOp::Min => ReduceOpCode::Min,
            ReduceOp::Max => ReduceOpCode::Max,
            ReduceOp::Mean => return Err(Error::invalid("a collectives hook is never asked for a mean")),
        })
    }
}

/// The key-value store every rank of a job shares (libtorch's TCPStore,
/// under a prefix of the hook's own). Borrowed: lent to `group_new` and
/// valid until `group_free` returns; there is no free function.
pub struct fulmen_dist_store {
    keys: Arc<KeyStore>,
}

impl Handle for fulmen_dist_store {
    const C_NAME: &'static str = "fulmen_dist_store";
}

fn store_arg(store: *const fulmen_dist_store) -> Result<Arc<KeyStore>> {
    // SAFETY: checked against the handle registry.
    Ok(Arc::clone(&unsafe { handle::borrow(store, "store") }?.keys))
}

unsafe fn bytes_arg<'a>(data: *const c_void, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, format!("argument `{what}` is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(Error::invalid(format!("`{what}` of {len} bytes cannot exist")));
    }
    Ok(std::slice::from_raw_parts(data.cast(), len))
}

/// Sets `key` to the `len` bytes at `data` (a unique id the other ranks
/// read, say), replacing any value.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` not UTF-8, `len` past
/// isize::MAX), FULMEN_CODE_DISTRIBUTED (the store cannot be reached).
/// Thread rules: any thread, while the store is lent. The store is the
/// job's TCPStore, shared with fulmen's own rendezvous: keep values small
/// (ids, not tensors, in a real hook).
#[no_mangle]
pub unsafe extern "C" fn fulmen_dist_store_set(
    store: *const fulmen_dist_store,
    key: *const c_char,
    data: *const c_void,
    len: usize,
) -> *mut fulmen_error {
    guard!(|| {
        let keys = store_arg(store)?;
        keys.set(str_arg(key, "key")?, bytes_arg(data, len, "data")?)
    })
}

/// Waits until `key` is set (up to the job's timeout; it gives up at once
/// when a launched rank has ended) and copies its value into
/// `buf[0..capacity]`; its length goes to `*len_out`. When `capacity`
/// is too small only `*len_out` is written and the call fails with
/// FULMEN_CODE_OUT_OF_RANGE, so a caller asks again with `*len_out` bytes.
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` not UTF-8),
/// FULMEN_CODE_OUT_OF_RANGE (`capacity` too small), FULMEN_CODE_DISTRIBUTED
/// (the key was not set within the timeout, or the store is gone).
/// Thread rules: as `fulmen_dist_store_set`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_dist_store_get(
    store: *const fulmen_dist_store,
    key: *const c_char,
    buf: *mut c_void,
    capacity: usize,
    len_out: *mut usize,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(len_out, "len_out")?;
        let keys = store_arg(store)?;
        let key = str_arg(key, "key")?;
        if capacity > 0 {
            check_out(buf, "buf")?;
        }
        if capacity > isize::MAX as usize {
            return Err(Error::invalid(format!("a `buf` of {capacity} bytes cannot exist")));
        }
        let dst: &mut [u8] = if capacity == 0 { &mut [] } else { std::slice::from_raw_parts_mut(buf.cast(), capacity) };
        match keys.get(key, dst) {
            Ok(n) => write_out(len_out, "len_out", n),
            Err((e, n)) => {
                if e.code == ErrorCode::OutOfRange {
                    len_out.write(n);
                }
                Err(e)
            }
        }
    })
}

/// Adds `delta` to the counter `key` (0 when not set yet) and writes the
/// new value to `*out` (the store's atomic add: ranks count themselves
/// with it).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` not UTF-8),
/// FULMEN_CODE_DISTRIBUTED (the store cannot be reached, or the value of
/// `key` is not a counter).
/// Thread rules: as `fulmen_dist_store_set`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_dist_store_add(
    store: *const fulmen_dist_store,
    key: *const c_char,
    delta: i64,
    out: *mut i64,
) -> *mut fulmen_error {
    guard!(|| {
        check_out(out, "out")?;
        let keys = store_arg(store)?;
        write_out(out, "out", keys.add(str_arg(key, "key")?, delta)?)
    })
}

/// Deletes `key` and writes whether it was set to `*deleted` (may be NULL).
///
/// Errors: FULMEN_CODE_INVALID_ARGUMENT (`key` not UTF-8),
/// FULMEN_CODE_DISTRIBUTED (the store cannot be reached).
/// Thread rules: as `fulmen_dist_store_set`.
#[no_mangle]
pub unsafe extern "C" fn fulmen_dist_store_delete(
    store: *const fulmen_dist_store,
    key: *const c_char,
    deleted: *mut bool,
) -> *mut fulmen_error {
    guard!(|| {
        let keys = store_arg(store)?;
        let was = keys.delete(str_arg(key, "key")?)?;
        if !deleted.is_null() {
            deleted.write(was);
        }
        Ok(())
    })
}

/// A custom accelerator's collectives: DDP and FSDP on its devices through
/// the vendor's communication library instead of gloo (FSDP's gathers go
/// through `all_gather`, its gradients through `reduce_scatter`). Point
/// the accelerator vtable's `collectives` at one; it is copied at
/// registration. Set `struct_size` to `sizeof(fulmen_collectives)`; a
/// struct from before `reduce_scatter` was appended (its `struct_size`
/// ending before it) is taken without that slot.
///
/// The trainer uses it for DDP and FSDP when the accelerator's devices
/// are PrivateUse1 devices (or the CPU) and `process_group_backend` is
/// unset or names the hook. With `process_group_backend` "gloo", or with
/// no hook, DDP and FSDP on PrivateUse1 devices stage their tensors
/// through the CPU for gloo. On PrivateUse1 devices, metrics and stop decisions are still
/// reduced by gloo on the CPU; on CPU devices the hook reduces everything.
///
/// Every slot gets the accelerator's `userdata` and the group `group_new`
/// made. fulmen serialises the calls with the accelerator's other
/// callbacks; they come from the thread running the collective (the
/// trainer's, or libtorch's autograd thread for the device during
/// backward), in the same order on every rank. The trainer's
/// `callback_timeout` does not apply; the job's `timeout` bounds the
/// waits fulmen makes. A slot returns when the result is in the tensors
/// (or ordered before any later use of them on the device). Tensor
/// handles are borrowed for the call and share storage with the tensors
/// reduced, which are contiguous: write results in place
/// (`fulmen_tensor_copy_from_host`, `fulmen_tensor_copy_`, or through
/// `fulmen_tensor_data_ptr`). An error a slot returns fails the
/// collective, and the run, with FULMEN_CODE_DISTRIBUTED and the slot's
/// message; an error `group_new` returns fails the join (and the run)
/// with the code it returned, as any host callback's error, and its
/// message. Inside a slot, `fulmen_distributed_ranks` and
/// `fulmen_distributed_is_joined` answer; a call that starts a collective
/// of the job (`fulmen_distributed_all_reduce`, `_broadcast`,
/// `_all_gather`, `_barrier`, `_reduce_boolean_decision`) or ends it
/// (`fulmen_distributed_shutdown`) fails with FULMEN_CODE_INVALID_STATE,
/// and the job goes on.
///
/// Lifetime: the group lives as long as the job, until
/// `fulmen_distributed_shutdown`, and keeps the accelerator's userdata
/// alive that long, even when the accelerator is unregistered meanwhile.
/// A later run that names another accelerator's hook needs a shutdown
/// first.
#[repr(C)]
pub struct fulmen_collectives {
    /// `sizeof(fulmen_collectives)`.
    pub struct_size: usize,
    /// The backend's name, as `process_group_backend` names it ("hccl"):
    /// 1 to 64 characters of [a-z0-9_-], not "gloo", "nccl", "mpi", "ucc"
    /// or "xccl". Copied.
    pub name: *const c_char,
    /// Opens this rank's group of `world_size` ranks on `device`, once per
    /// job, before the first collective; writes the vendor's group (any
    /// pointer, passed back to every slot) to `*group_out`. `store` is
    /// shared with the other ranks (exchange a unique id through it); it
    /// stays valid until `group_free` returns. When it fails, the join
    /// fails with the code it returned and `group_free` is not called:
    /// release what it made before returning. It may call
    /// `fulmen_distributed_ranks`, not `fulmen_distributed_join`. NULL: the
    /// group is NULL.
    pub group_new: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            store: *const fulmen_dist_store,
            rank: i32,
            world_size: i32,
            device: fulmen_device,
            group_out: *mut *mut c_void,
        ) -> *mut fulmen_error,
    >,
    /// Closes a group when the job ends (`fulmen_distributed_shutdown`).
    /// NULL: nothing.
    pub group_free: Option<unsafe extern "C" fn(userdata: *mut c_void, group: *mut c_void)>,
    /// Reduces `tensors[0..n]` in place over the ranks with `op` (a
    /// `fulmen_reduce_op`). Required.
    pub all_reduce: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            group: *mut c_void,
            tensors: *const *mut fulmen_tensor,
            n: usize,
            op: i32,
        ) -> *mut fulmen_error,
    >,
    /// Copies `tensors[0..n]` of rank `root` into every rank's, in place.
    /// Required.
    pub broadcast: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            group: *mut c_void,
            tensors: *const *mut fulmen_tensor,
            n: usize,
            root: i32,
        ) -> *mut fulmen_error,
    >,
    /// Writes rank r's `input` into `outputs[r]` for every rank (`n` is
    /// the world size; every output has the input's shape and dtype).
    /// Required.
    pub all_gather: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            group: *mut c_void,
            input: *const fulmen_tensor,
            outputs: *const *mut fulmen_tensor,
            n: usize,
        ) -> *mut fulmen_error,
    >,
    /// Returns when every rank has called it. Required.
    pub barrier: Option<unsafe extern "C" fn(userdata: *mut c_void, group: *mut c_void) -> *mut fulmen_error>,
    /// Reduces `input` over the ranks with `op` and writes this rank's
    /// block of the result to `output` (torch's `reduce_scatter_tensor`:
    /// `input` holds world size x `output`'s elements, rank r's block the
    /// r-th run of them; both contiguous, of one dtype). FSDP reduces its
    /// gradients with it. NULL, a struct from before this slot, or a slot
    /// whose first call answers FULMEN_CODE_UNSUPPORTED (a group without
    /// the collective: answer before communicating, on every rank alike;
    /// the group is not asked again): `all_reduce` of the whole input,
    /// this rank's block kept, which moves world size times the data. Any
    /// other error, and UNSUPPORTED after a first call that worked, fails
    /// the collective as any slot's error does.
    pub reduce_scatter: Option<
        unsafe extern "C" fn(
            userdata: *mut c_void,
            group: *mut c_void,
            input: *const fulmen_tensor,
            output: *mut fulmen_tensor,
            op: i32,
        ) -> *mut fulmen_error,
    >,
}

type AllReduceFn =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *const *mut fulmen_tensor, usize, i32) -> *mut fulmen_error;
type AllGatherFn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *const fulmen_tensor,
    *const *mut fulmen_tensor,
    usize,
) -> *mut fulmen_error;
type ReduceScatterFn =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *const fulmen_tensor, *mut fulmen_tensor, i32) -> *mut fulmen_error;
type GroupNewFn = unsafe extern "C" fn(
    *mut c_void,
    *const fulmen_dist_store,
    i32,
    i32,
    fulmen_device,
    *mut *mut c_void,
) -> *mut fulmen_error;

/// The slots of a registered `fulmen_collectives`, checked.
#[derive(Clone, Copy)]
struct Slots {
    group_new: Option<GroupNewFn>,
    group_free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
    all_reduce: AllReduceFn,
    broadcast: AllReduceFn,
    all_gather: AllGatherFn,
    barrier: unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut fulmen_error,
    reduce_scatter: Option<ReduceScatterFn>,
}

/// Names c10d or fulmen use for their own backends.
const RESERVED: [&str; 5] = ["gloo", "nccl", "mpi", "ucc", "xccl"];

/// A host's collectives, as the registry keeps them.
pub(crate) struct HostCollectives {
    name: String,
    accelerator: String,
    userdata: Arc<HostLock<Userdata>>,
    slots: Slots,
}

impl HostCollectives {
    /// Checks and copies the host's `c` (not NULL) for the accelerator
    /// `accelerator`, whose callbacks share `userdata`'s lock. A struct
    /// from before `reduce_scatter` was appended has none.
    ///
    /// # Safety
    /// `c` points to at least its `struct_size` readable bytes.
    pub(crate) unsafe fn copy(
        c: *const fulmen_collectives,
        accelerator: &str,
        userdata: Arc<HostLock<Userdata>>,
    ) -> Result<HostCollectives> {
        let appended = std::mem::offset_of!(fulmen_collectives, reduce_scatter);
        let c = &read_vtable(c, appended, "fulmen_collectives")?;
        if c.name.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "fulmen_collectives.name is NULL"));
        }
        let name = CStr::from_ptr(c.name)
            .to_str()
            .map_err(|_| Error::invalid("fulmen_collectives.name is not UTF-8"))?
            .to_owned();
        let well_formed = (1..=64).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !well_formed || RESERVED.contains(&name.as_str()) {
            return Err(Error::invalid(format!(
                "fulmen_collectives.name {name:?}: expected 1 to 64 characters of [a-z0-9_-], not one of {RESERVED:?}"
            )));
        }
        let required = |slot: bool, what: &str| {
            if slot {
                Ok(())
            } else {
                Err(Error::invalid(format!("fulmen_collectives.{what} is NULL; the slot is required")))
            }
        };
        required(c.all_reduce.is_some(), "all_reduce")?;
        required(c.broadcast.is_some(), "broadcast")?;
        required(c.all_gather.is_some(), "all_gather")?;
        required(c.barrier.is_some(), "barrier")?;
        let (Some(all_reduce), Some(broadcast), Some(all_gather), Some(barrier)) =
            (c.all_reduce, c.broadcast, c.all_gather, c.barrier)
        else {
            unreachable!("checked above")
        };
        Ok(HostCollectives {
            name,
            accelerator: accelerator.to_owned(),
            userdata,
            slots: Slots {
                group_new: c.group_new,
                group_free: c.group_free,
                all_reduce,
                broadcast,
                all_gather,
                barrier,
                reduce_scatter: c.reduce_scatter,
            },
        })
    }
}

thread_local! {
    /// How many collectives slots run on this thread (more than one when a
    /// group is closed inside a slot).
    static SLOTS_HERE: Cell<usize> = const { Cell::new(0) };
    /// How many ran on the callback thread this thread is attached to when
    /// its callback began (`fulmen_callback_attach`).
    static SLOTS_OF_CALLER: Cell<usize> = const { Cell::new(0) };
}

/// The collectives slots this thread's work runs inside: its own, and
/// those of the callback thread it is attached to.
pub(crate) fn slots_here() -> usize {
    SLOTS_HERE.with(Cell::get) + SLOTS_OF_CALLER.with(Cell::get)
}

/// Sets the slots the callback thread this thread is attached to runs
/// inside (0 when it detaches).
pub(crate) fn set_caller_slots(n: usize) {
    // At thread exit the cell may be gone already: nothing to clear then.
    let _ = SLOTS_OF_CALLER.try_with(|c| c.set(n));
}

/// Marks the calling thread as running a collectives slot while alive.
struct InSlot;

impl InSlot {
    fn enter() -> InSlot {
        SLOTS_HERE.with(|n| n.set(n.get() + 1));
        InSlot
    }
}

impl Drop for InSlot {
    fn drop(&mut self) {
        SLOTS_HERE.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Refuses `call` (a `fulmen_distributed_*` function) from inside a
/// collectives slot: a slot must not start a collective of its own job,
/// nor end the job under the collective it is running.
pub(crate) fn refuse_in_slot(call: &str) -> Result<()> {
    if slots_here() == 0 {
        return Ok(());
    }
    Err(Error::state(format!(
        "{call} was called from inside a collectives slot: a slot cannot start a collective of its own job, \
         nor shut the job down under the collective it runs"
    )))
}

/// Runs one slot under the accelerator's lock, in a tensor scope. Slots
/// wait for other ranks, so the trainer's `callback_timeout` does not
/// apply (the job's timeout does).
fn call_slot(
    userdata: &HostLock<Userdata>,
    accelerator: &str,
    what: &str,
    f: impl FnOnce(*mut c_void) -> *mut fulmen_error,
) -> Result<()> {
    let ud = userdata.lock(&format!("accelerator {accelerator:?}"))?;
    let _slot = InSlot::enter();
    call_host_untimed(&format!("accelerator {accelerator:?} collectives {what}"), || f(ud.ptr()))
}

impl DeviceCollectives for HostCollectives {
    fn name(&self) -> &str {
        &self.name
    }

    fn new_group(&self, keys: Arc<KeyStore>, rank: usize, world: usize, device: Device) -> Result<Box<dyn CommGroup>> {
        let rank_c = i32::try_from(rank).map_err(|_| Error::invalid(format!("rank {rank} is too large")))?;
        let world_c = i32::try_from(world).map_err(|_| Error::invalid(format!("world size {world} is too large")))?;
        let spec = DeviceSpec::from_device(device);
        let dev = fulmen_device { device_type: spec.kind as i32, index: spec.index };
        let store = handle::into_raw(fulmen_dist_store { keys });
        let mut group: *mut c_void = std::ptr::null_mut();
        let mut ud_ptr: *mut c_void = std::ptr::null_mut();
        let opened = call_slot(&self.userdata, &self.accelerator, "group_new", |u| {
            ud_ptr = u;
            match self.slots.group_new {
                // SAFETY: the host's own slot; `store` stays valid until the group is dropped.
                Some(f) => unsafe { f(u, store, rank_c, world_c, dev, &mut group) },
                None => std::ptr::null_mut(),
            }
        });
        let host = HostGroup {
            accelerator: self.accelerator.clone(),
            userdata: Arc::clone(&self.userdata),
            ud_ptr,
            slots: self.slots,
            group,
            store,
            opened: opened.is_ok(),
            no_reduce_scatter: std::sync::atomic::AtomicBool::new(self.slots.reduce_scatter.is_none()),
            reduce_scattered: std::sync::atomic::AtomicBool::new(false),
        };
        opened?;
        Ok(Box::new(host))
    }
}

/// One rank's group of a host's collectives library.
struct HostGroup {
    accelerator: String,
    userdata: Arc<HostLock<Userdata>>,
    /// The accelerator's userdata pointer (fixed for its life), for
    /// `group_free` from inside one of its callbacks.
    ud_ptr: *mut c_void,
    slots: Slots,
    group: *mut c_void,
    store: *mut fulmen_dist_store,
    /// Whether `group_new` succeeded (and `group_free` is owed).
    opened: bool,
    /// The host has no `reduce_scatter`, or its first call said UNSUPPORTED.
    no_reduce_scatter: std::sync::atomic::AtomicBool,
    /// A `reduce_scatter` call worked: UNSUPPORTED is an error from then on.
    reduce_scattered: std::sync::atomic::AtomicBool,
}

// SAFETY: the host's group is used by one collective at a time (the c10d
// backend serialises them) under the accelerator's lock; the header tells
// hosts that slots may run on libtorch's autograd thread.
unsafe impl Send for HostGroup {}

impl HostGroup {
    fn call(&self, what: &str, f: impl FnOnce(*mut c_void) -> *mut fulmen_error) -> Result<()> {
        call_slot(&self.userdata, &self.accelerator, what, f)
    }
}

/// New borrowed handles for `tensors`, released when the scope ends.
fn handles(tensors: &[Tensor]) -> Vec<*mut fulmen_tensor> {
    tensors.iter().map(|t| new_handle(t.shallow_clone())).collect()
}

impl CommGroup for HostGroup {
    fn all_reduce(&self, tensors: &[Tensor], op: ReduceOp) -> Result<()> {
        let op = ReduceOpCode::of(op)? as i32;
        let _scope = TensorScope::enter();
        let list = handles(tensors);
        let f = self.slots.all_reduce;
        self.call("all_reduce", |u| unsafe { f(u, self.group, list.as_ptr(), list.len(), op) })
    }

    fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<()> {
        let root = i32::try_from(root).map_err(|_| Error::invalid(format!("root rank {root} is too large")))?;
        let _scope = TensorScope::enter();
        let list = handles(tensors);
        let f = self.slots.broadcast;
        self.call("broadcast", |u| unsafe { f(u, self.group, list.as_ptr(), list.len(), root) })
    }

    fn all_gather(&self, input: &Tensor, outputs: &[Tensor]) -> Result<()> {
        let _scope = TensorScope::enter();
        let input = new_handle(input.shallow_clone());
        let list = handles(outputs);
        let f = self.slots.all_gather;
        self.call("all_gather", |u| unsafe { f(u, self.group, input, list.as_ptr(), list.len()) })
    }

    fn barrier(&self) -> Result<()> {
        let f = self.slots.barrier;
        self.call("barrier", |u| unsafe { f(u, self.group) })
    }

    fn reduce_scatter(&self, input: &Tensor, output: &Tensor, op: ReduceOp) -> Result<bool> {
        use std::sync::atomic::Ordering;
        let Some(f) = self.slots.reduce_scatter.filter(|_| !self.no_reduce_scatter.load(Ordering::SeqCst)) else {
            return Ok(false);
        };
        let op = ReduceOpCode::of(op)? as i32;
        let _scope = TensorScope::enter();
        let (input, output) = (new_handle(input.shallow_clone()), new_handle(output.shallow_clone()));
        match self.call("reduce_scatter", |u| unsafe { f(u, self.group, input, output, op) }) {
            Ok(()) => {
                self.reduce_scattered.store(true, Ordering::SeqCst);
                Ok(true)
            }
            Err(e) if e.code == ErrorCode::Unsupported && !self.reduce_scattered.load(Ordering::SeqCst) => {
                self.no_reduce_scatter.store(true, Ordering::SeqCst);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for HostGroup {
    fn drop(&mut self) {
        if self.opened {
            if let Some(f) = self.slots.group_free {
                let group = self.group;
                if self.userdata.held_here() {
                    // The job ends inside one of the accelerator's own
                    // callbacks (a shutdown from its teardown): calls are
                    // serialised already.
                    let _slot = InSlot::enter();
                    // SAFETY: the host's own slot, with the group it made.
                    unsafe { f(self.ud_ptr, group) };
                } else if let Err(e) = self.call("group_free", |u| {
                    // SAFETY: as above.
                    unsafe { f(u, group) };
                    std::ptr::null_mut()
                }) {
                    eprintln!("fulmen: warning: the collectives group was not closed: {}", e.message);
                }
            }
        }
        // SAFETY: made by handle::into_raw in new_group, revoked once; calls
        // still using it on other threads finish first.
        drop(unsafe { handle::revoke(self.store) });
    }
}
