package fulmen

/*
#include <fulmen.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Strategy is a strategy from the registry with its settings (Lightning's
// Strategy objects, e.g. DDPStrategy(find_unused_parameters=True)). Hand
// it to TrainerOptions.SetStrategy (which copies it) or to
// DistributedJoin and NewDDP. Close it when done.
type Strategy struct {
	h handle[*C.fulmen_strategy]
}

// NewStrategy creates the strategy registered as name (trimmed,
// case-insensitive) with its default settings: "auto" (ddp when several
// devices or processes are asked for, else single_device),
// "single_device", "ddp" (one process per device; started by torchrun,
// SLURM, or fulmen re-executing the host program), "ddp_spawn",
// "ddp_find_unused_parameters_true", "ddp_find_unused_parameters_false".
// An unknown name is ErrInvalidArgument listing the registered ones.
func NewStrategy(name string) (*Strategy, error) {
	n := cString(name)
	defer freeCString(n)
	var out *C.fulmen_strategy
	if err := check(C.fulmen_strategy_new(n, &out)); err != nil {
		return nil, err
	}
	s := &Strategy{}
	s.h.store(out)
	runtime.SetFinalizer(s, (*Strategy).Close)
	return s, nil
}

func (s *Strategy) ptr() *C.fulmen_strategy {
	if s == nil {
		gcStress()
		return nil
	}
	h := s.h.load()
	gcStress() // after the last use of the wrapper: only KeepAlive keeps it alive
	return h
}

// Close frees the strategy; idempotent. The error is always nil.
func (s *Strategy) Close() error {
	if s == nil {
		return nil
	}
	h := s.h.take()
	if h == nil {
		return nil
	}
	C.fulmen_strategy_free(h)
	runtime.SetFinalizer(s, nil)
	return nil
}

// Set sets a setting from text: find_unused_parameters ("true"/"false"),
// process_group_backend ("gloo", "nccl", "none" = gloo on CPU, nccl on
// CUDA), timeout (seconds: rendezvous and every collective; default
// 1800), bucket_cap_mb (default 25), num_nodes (default 1); for "fsdp":
// sharding_strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD), auto_wrap_policy
// (comma-separated module class names), min_num_params,
// activation_checkpointing_policy (comma-separated module class names whose
// forwards are checkpointed), state_dict_type ("full" or "sharded"). A bad
// key or value is ErrInvalidArgument (ErrUnsupported for a
// value fulmen does not have yet) and changes nothing.
func (s *Strategy) Set(key, value string) error {
	k := cString(key)
	defer freeCString(k)
	v := cString(value)
	defer freeCString(v)
	err := check(C.fulmen_strategy_set(s.ptr(), k, v))
	runtime.KeepAlive(s)
	return err
}

// Name is the strategy's registry name ("ddp" for NewStrategy("DDP")).
func (s *Strategy) Name() (string, error) {
	name, err := readString(func(b *C.char, c C.size_t, n *C.size_t) cErr {
		return C.fulmen_strategy_name(s.ptr(), b, c, n)
	})
	runtime.KeepAlive(s)
	return name, err
}

// SetStrategy uses a strategy with its settings (copied) for runs with
// these options, as Lightning's Trainer(strategy=DDPStrategy(...));
// Set("strategy", name) picks one with default settings.
func (o *TrainerOptions) SetStrategy(s *Strategy) error {
	err := check(C.fulmen_trainer_options_set_strategy(o.ptr(), s.ptr()))
	runtime.KeepAlive(o)
	runtime.KeepAlive(s)
	return err
}

// StrategyInfo is one entry of the strategy registry.
type StrategyInfo struct {
	// Name is the registry name.
	Name string
	// Description is a one-line description.
	Description string
}

// StrategyRegistry lists the registered strategies in registry order.
func StrategyRegistry() ([]StrategyInfo, error) {
	var n C.size_t
	if err := check(C.fulmen_strategy_registry_len(&n)); err != nil {
		return nil, err
	}
	out := make([]StrategyInfo, 0, int(n))
	for i := 0; i < int(n); i++ {
		info, err := strategyRegistryEntry(i)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func strategyRegistryEntry(i int) (StrategyInfo, error) {
	name, desc := make([]byte, 64), make([]byte, 256)
	for {
		var nn, dn C.size_t
		err := check(C.fulmen_strategy_registry_entry(C.size_t(i),
			(*C.char)(unsafe.Pointer(&name[0])), C.size_t(len(name)), &nn,
			(*C.char)(unsafe.Pointer(&desc[0])), C.size_t(len(desc)), &dn))
		switch {
		case err == nil:
			return StrategyInfo{Name: string(name[:nn]), Description: string(desc[:dn])}, nil
		case grows(err, int(nn)+1, len(name)):
			name = make([]byte, int(nn)+1)
		case grows(err, int(dn)+1, len(desc)):
			desc = make([]byte, int(dn)+1)
		default:
			return StrategyInfo{}, err
		}
	}
}
