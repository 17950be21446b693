//! Declarations of `csrc/foreach.cpp`: torch.optim's foreach updates.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_foreach_sgd(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        momentum_buffers: *const *mut c_void,
        new_buffers: *mut *mut c_void,
        n: size_t,
        weight_decay: f64,
        momentum: f64,
        lr: f64,
        dampening: f64,
        nesterov: bool,
        maximize: bool,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_foreach_adam(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        max_exp_avg_sqs: *const *mut c_void,
        step_sizes: *const f64,
        bias_correction2_sqrts: *const f64,
        n: size_t,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        maximize: bool,
        decoupled: bool,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_foreach_adagrad(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        state_sums: *const *mut c_void,
        minus_clrs: *const f64,
        n: size_t,
        weight_decay: f64,
        eps: f64,
        maximize: bool,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_foreach_rmsprop(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        square_avgs: *const *mut c_void,
        grad_avgs: *const *mut c_void,
        momentum_buffers: *const *mut c_void,
        n: size_t,
        lr: f64,
        alpha: f64,
        eps: f64,
        weight_decay: f64,
        momentum: f64,
        maximize: bool,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
