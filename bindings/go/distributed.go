package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"time"
)

// negativeError is the ErrInvalidArgument of a count or index below zero
// (checked here: the C API takes size_t).
func negativeError(what string, v int) error {
	return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("%s must be >= 0, got %d", what, v)}
}

// DistributedJoin joins the distributed job with s's settings (backend,
// timeout, num_nodes) and processesPerNode processes on each node: under
// torchrun or SLURM their environment says where rank 0 is; otherwise
// fulmen starts local ranks 1.. by re-executing this program with the same
// arguments and LOCAL_RANK set, and this process is rank 0. A process that
// already joined gets the same job back. cuda picks nccl when the strategy
// names no backend.
func DistributedJoin(s *Strategy, processesPerNode int, cuda bool) error {
	if processesPerNode < 0 {
		return negativeError("processesPerNode", processesPerNode)
	}
	err := check(C.fulmen_distributed_join(s.ptr(), C.size_t(processesPerNode), C.bool(cuda)))
	runtime.KeepAlive(s)
	return err
}

// DistributedIsJoined reports whether this process has joined a
// distributed job.
func DistributedIsJoined() (bool, error) {
	var v C.bool
	err := check(C.fulmen_distributed_is_joined(&v))
	return bool(v), err
}

// Ranks says where this process is in a distributed job.
type Ranks struct {
	// Rank is the global rank, 0 .. WorldSize-1.
	Rank int
	// LocalRank is the rank on this node.
	LocalRank int
	// WorldSize is the number of processes of the job.
	WorldSize int
}

// DistributedRanks is this process's ranks and the world size; rank 0 of
// 1 when it has not joined a job.
func DistributedRanks() (Ranks, error) {
	var r, l, w C.size_t
	if err := check(C.fulmen_distributed_ranks(&r, &l, &w)); err != nil {
		return Ranks{}, err
	}
	return Ranks{Rank: int(r), LocalRank: int(l), WorldSize: int(w)}, nil
}

// AllReduce reduces t in place over all ranks with op: "sum", "mean" (sum
// divided by the world size), "min", "max" or "product". Before
// DistributedJoin it is ErrInvalidState; ErrDistributed when another rank
// fails or the strategy's timeout passes (as for every collective).
func AllReduce(t *Tensor, op string) error {
	o := cString(op)
	defer freeCString(o)
	err := check(C.fulmen_distributed_all_reduce(t.ptr(), o))
	runtime.KeepAlive(t)
	return err
}

// XLAAllReduce reduces t (on an XLA device) in place over all ranks with op
// inside the step's XLA graph (torch_xla's xm.all_reduce): every rank makes
// the same calls in a step. It needs one XLA device per process and one per
// rank in XLA's job (TPUs from v4 on); elsewhere it is ErrUnsupported, with
// the reason.
func XLAAllReduce(t *Tensor, op string) error {
	o := cString(op)
	defer freeCString(o)
	err := check(C.fulmen_distributed_xla_all_reduce(t.ptr(), o))
	runtime.KeepAlive(t)
	return err
}

// Broadcast copies t from rank root into t on every rank.
func Broadcast(t *Tensor, root int) error {
	if root < 0 {
		return negativeError("root", root)
	}
	err := check(C.fulmen_distributed_broadcast(t.ptr(), C.size_t(root)))
	runtime.KeepAlive(t)
	return err
}

// AllGather is every rank's t stacked along a new first dimension (of size
// the world size). Every rank passes the same shape and dtype.
func AllGather(t *Tensor) (*Tensor, error) {
	var out *C.fulmen_tensor
	err := check(C.fulmen_distributed_all_gather(t.ptr(), &out))
	runtime.KeepAlive(t)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Barrier waits until every rank reaches the barrier (ErrDistributed after
// the timeout).
func Barrier() error { return check(C.fulmen_distributed_barrier()) }

// ReduceBooleanDecision is Lightning's reduce_boolean_decision: true when
// every rank's decision is true (all), or when any rank's is (!all).
func ReduceBooleanDecision(decision, all bool) (bool, error) {
	var v C.bool
	err := check(C.fulmen_distributed_reduce_boolean_decision(C.bool(decision), C.bool(all), &v))
	return bool(v), err
}

// DistributedShutdown leaves the job. On rank 0 of fulmen's own launcher
// it waits up to timeout for the ranks it started to exit, and is
// ErrDistributed naming the first that failed or still runs. Without a job
// it does nothing. A negative timeout is ErrInvalidArgument.
func DistributedShutdown(timeout time.Duration) error {
	return check(C.fulmen_distributed_shutdown(C.double(timeout.Seconds())))
}

// DistributedAbort ends the job after a failure of this rank's own code:
// reason is recorded in the job's store, the ranks fulmen's launcher
// started from this process are killed, and this process leaves the job.
// The other ranks' collectives then fail with ErrDistributed reading
// "rank N failed: reason" (once this process exits or closes its last DDP
// or FSDP). Without a job it does nothing.
func DistributedAbort(reason string) error {
	r := cString(reason)
	defer freeCString(r)
	return check(C.fulmen_distributed_abort(r))
}

// DDP is DDP for a Go-owned training loop (torch's
// DistributedDataParallel): a model whose gradients are averaged over the
// joined job's ranks during backward. Each training step calls
// PrepareForward, the forward, PrepareBackward(loss), then loss.Backward,
// on every rank (Python ranks running DistributedDataParallel included);
// steps that only accumulate run between SetSync(false) and SetSync(true).
// Close it when done (the model stays).
type DDP struct {
	h handle[*C.fulmen_ddp]
}

// NewDDP wraps model in the joined job as DistributedDataParallel does: it
// checks that every rank has the same trainable parameters, copies rank
// 0's parameters and then its buffers to all ranks, and hooks gradient
// averaging (with s's find_unused_parameters, bucket_cap_mb and
// broadcast_buffers). Before DistributedJoin it is ErrInvalidState.
func NewDDP(model *Model, s *Strategy) (*DDP, error) {
	var out *C.fulmen_ddp
	err := check(C.fulmen_ddp_new(model.ptr(), s.ptr(), &out))
	runtime.KeepAlive(model)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	d := &DDP{}
	d.h.store(out)
	runtime.SetFinalizer(d, (*DDP).Close)
	return d, nil
}

func (d *DDP) ptr() *C.fulmen_ddp {
	if d == nil {
		gcStress()
		return nil
	}
	h := d.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the DDP wrapper (the model stays); idempotent. The error is
// always nil.
func (d *DDP) Close() error {
	if d == nil {
		return nil
	}
	h := d.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_ddp_free(h)
	runtime.SetFinalizer(d, nil)
	return nil
}

// SetSync is torch's no_sync(): while sync is false, backward passes only
// accumulate gradients locally; the first synchronized step after averages
// the sum. Steps call PrepareForward and PrepareBackward either way.
func (d *DDP) SetSync(sync bool) error {
	err := check(C.fulmen_ddp_set_sync(d.ptr(), C.bool(sync)))
	runtime.KeepAlive(d)
	return err
}

// PrepareForward is called before every forward pass of the model (as
// DistributedDataParallel's forward): it prepares gradient averaging and
// broadcasts rank 0's buffers when the previous forward synchronized.
func (d *DDP) PrepareForward() error {
	err := check(C.fulmen_ddp_prepare_forward(d.ptr()))
	runtime.KeepAlive(d)
	return err
}

// PrepareBackward is called after the forward pass, before loss.Backward:
// that backward then averages the gradients over ranks.
func (d *DDP) PrepareBackward(loss *Tensor) error {
	err := check(C.fulmen_ddp_prepare_backward(d.ptr(), loss.ptr()))
	runtime.KeepAlive(d)
	runtime.KeepAlive(loss)
	return err
}

// FSDP is FSDP for a Go-owned training loop (torch's fully_shard): the
// model's parameters, gradients and optimizer states sharded across the
// joined job's ranks. Build the optimizers over the model after NewFSDP;
// each training step, on every rank: zero the gradients (the optimizer's
// ZeroGrad before PrepareForward, or ZeroGrad here at any point),
// PrepareForward, the forward, loss.Backward, FinishBackward, optionally
// ClipGradNorm, then the optimizers' Step. Between steps the parameters
// hold this rank's rows: Unshard gathers them (and the optimizers'
// states) to save or read, Reshard goes back to training. Closing it
// without Unshard leaves the model with this rank's shards.
type FSDP struct {
	h handle[*C.fulmen_fsdp]
}

// NewFSDP shards model with s's FSDP settings (sharding_strategy,
// auto_wrap_policy, min_num_params, activation_checkpointing_policy,
// param_dtype, reduce_dtype) after copying rank 0's parameters and buffers
// to every rank. Before DistributedJoin, or for a model already sharded,
// it is ErrInvalidState.
func NewFSDP(model *Model, s *Strategy) (*FSDP, error) {
	var out *C.fulmen_fsdp
	err := check(C.fulmen_fsdp_new(model.ptr(), s.ptr(), &out))
	runtime.KeepAlive(model)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	f := &FSDP{}
	f.h.store(out)
	runtime.SetFinalizer(f, (*FSDP).Close)
	return f, nil
}

func (f *FSDP) ptr() *C.fulmen_fsdp {
	if f == nil {
		gcStress()
		return nil
	}
	h := f.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the FSDP wrapper without a collective: the model keeps its
// full parameters after Unshard, else this rank's shards; idempotent. The
// error is always nil.
func (f *FSDP) Close() error {
	if f == nil {
		return nil
	}
	h := f.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_fsdp_free(h)
	runtime.SetFinalizer(f, nil)
	return nil
}

// SetSync is torch's no_sync(): while sync is false, backward passes
// accumulate full-sized gradients without communication; the next step
// with sync true averages the sum into the shards.
func (f *FSDP) SetSync(sync bool) error {
	err := check(C.fulmen_fsdp_set_sync(f.ptr(), C.bool(sync)))
	runtime.KeepAlive(f)
	return err
}

// PrepareForward is called before every forward pass of the model
// (evaluation ones too). It is ErrInvalidState when the last backward's
// gradients were not averaged (FinishBackward was not called) or the model
// is unsharded.
func (f *FSDP) PrepareForward() error {
	err := check(C.fulmen_fsdp_prepare_forward(f.ptr()))
	runtime.KeepAlive(f)
	return err
}

// FinishBackward is called after backward, before clipping and the
// optimizers' Step: the gradients are averaged into the shards.
func (f *FSDP) FinishBackward() error {
	err := check(C.fulmen_fsdp_finish_backward(f.ptr()))
	runtime.KeepAlive(f)
	return err
}

// ClipGradNorm clips the gradients by their 2-norm over every rank's
// shards and returns the norm before clipping.
func (f *FSDP) ClipGradNorm(maxNorm float64) (float64, error) {
	var total C.double
	err := check(C.fulmen_fsdp_clip_grad_norm(f.ptr(), C.double(maxNorm), &total))
	runtime.KeepAlive(f)
	return float64(total), err
}

// ZeroGrad is model.zero_grad(), right at any point of a step: every
// gradient dropped (setToNone) or zeroed.
func (f *FSDP) ZeroGrad(setToNone bool) error {
	err := check(C.fulmen_fsdp_zero_grad(f.ptr(), C.bool(setToNone)))
	runtime.KeepAlive(f)
	return err
}

// withOptimizers calls call with the C handles of optimizers (NULL and 0
// for none), keeping them alive through the call.
func withOptimizers(optimizers []*Optimizer, call func(**C.fulmen_optimizer, C.size_t) *C.fulmen_error) error {
	var handles []*C.fulmen_optimizer
	var first **C.fulmen_optimizer
	if len(optimizers) > 0 {
		handles = make([]*C.fulmen_optimizer, len(optimizers))
		for i, o := range optimizers {
			handles[i] = o.ptr()
		}
		first = &handles[0]
	}
	err := check(call(first, C.size_t(len(handles))))
	runtime.KeepAlive(optimizers)
	return err
}

// Unshard gathers the full parameters into the model and the optimizers'
// states into their full shapes, on every rank (a collective): they can
// then be saved, read or loaded as unsharded ones until Reshard.
func (f *FSDP) Unshard(optimizers ...*Optimizer) error {
	err := withOptimizers(optimizers, func(o **C.fulmen_optimizer, n C.size_t) *C.fulmen_error {
		return C.fulmen_fsdp_unshard(f.ptr(), o, n)
	})
	runtime.KeepAlive(f)
	return err
}

// Reshard follows Unshard: every rank keeps its rows of the parameters'
// and the optimizers' current values (loaded ones included), and training
// can go on.
func (f *FSDP) Reshard(optimizers ...*Optimizer) error {
	err := withOptimizers(optimizers, func(o **C.fulmen_optimizer, n C.size_t) *C.fulmen_error {
		return C.fulmen_fsdp_reshard(f.ptr(), o, n)
	})
	runtime.KeepAlive(f)
	return err
}
