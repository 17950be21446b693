package fulmen

/*
#include <fulmen.h>
*/
import "C"

import "fmt"

// The run's optimizers from a hook (Lightning's trainer.optimizers and the
// optimizer argument of on_before_optimizer_step): by index, as
// OptimizerIndex names the hook's own.

// OptimizerCount is the number of the run's optimizers (Lightning's
// len(trainer.optimizers)): those ConfigureOptimizers added, 0 in
// validate, test and predict.
func (c *HookContext) OptimizerCount() (int, error) {
	var n C.size_t
	err := check(C.fulmen_hook_context_optimizer_count(c.ptr(), &n))
	return int(n), err
}

// ParamGroupCount is the number of parameter groups of the run's optimizer
// optimizer.
func (c *HookContext) ParamGroupCount(optimizer int) (int, error) {
	if optimizer < 0 {
		return 0, &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("optimizer %d", optimizer)}
	}
	var n C.size_t
	err := check(C.fulmen_hook_context_param_group_count(c.ptr(), C.size_t(optimizer), &n))
	return int(n), err
}

// ParamGroup returns hyperparameter name ("lr", "momentum", "betas.0", ...
// as Optimizer.ParamGroup) of group of the run's optimizer optimizer:
// Lightning's optimizer.param_groups[group][name].
func (c *HookContext) ParamGroup(optimizer, group int, name string) (float64, error) {
	if optimizer < 0 || group < 0 {
		return 0, &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("optimizer %d, param group %d", optimizer, group)}
	}
	cname := cString(name)
	defer freeCString(cname)
	var v C.double
	err := check(C.fulmen_hook_context_param_group_get(c.ptr(), C.size_t(optimizer), C.size_t(group), cname, &v))
	return float64(v), err
}

// SetParamGroup sets hyperparameter name of group of the run's optimizer
// optimizer for the next steps, checked as Optimizer.SetParamGroup checks
// it.
func (c *HookContext) SetParamGroup(optimizer, group int, name string, value float64) error {
	if optimizer < 0 || group < 0 {
		return &Error{Code: CodeOutOfRange, Message: fmt.Sprintf("optimizer %d, param group %d", optimizer, group)}
	}
	cname := cString(name)
	defer freeCString(cname)
	return check(C.fulmen_hook_context_param_group_set(c.ptr(), C.size_t(optimizer), C.size_t(group), cname, C.double(value)))
}
