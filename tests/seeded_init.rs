//! The init functions draw from libtorch's global generator, as PyTorch's
//! do, so a seeded comparison is disturbed by any test that draws in
//! another thread at the same time. These run in their own process (this
//! test binary), one at a time, never beside the library's unit tests.
use fulmen::error::Result;
use fulmen::nn::init_fns::{
    kaiming_normal_, kaiming_uniform_, orthogonal_, trunc_normal_, xavier_normal_, xavier_uniform_, FanMode,
};
use fulmen::tensor::inplace;
use tch::{Device, Kind, Tensor};

/// sum(v[i] * i) / n in double, as the reference values were taken.
fn weighted_sum(t: &Tensor) -> f64 {
    let v = t.detach().to_kind(Kind::Double).flatten(0, -1);
    let n = v.numel() as i64;
    (v * Tensor::arange(n, (Kind::Double, Device::Cpu))).sum(Kind::Double).double_value(&[]) / n as f64
}

fn seeded(seed: i64, shape: &[i64], kind: Kind, f: impl FnOnce(&Tensor) -> Result<()>) -> f64 {
    tch::manual_seed(seed);
    let t = Tensor::empty(shape, (kind, Device::Cpu)).set_requires_grad(true);
    f(&t).unwrap();
    assert!(t.requires_grad() && t.is_leaf(), "still a trainable leaf");
    weighted_sum(&t)
}

fn close(got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "got {got}, PyTorch 2.13 {want}");
}

/// Values from `torch.manual_seed(s); nn.init.<f>_(torch.empty(shape), ...)`.
#[test]
fn same_seed_same_values_as_pytorch() {
    let f = Kind::Float;
    close(seeded(0, &[4, 6], f, |t| xavier_uniform_(t, 1.5)), 0.3169561307877302);
    close(seeded(1, &[3, 5, 2], f, |t| xavier_normal_(t, 0.5)), 0.34260412541528545);
    let ku = |t: &Tensor| kaiming_uniform_(t, 0.1, FanMode::FanOut, "leaky_relu");
    close(seeded(2, &[8, 3, 3, 3], f, ku), -2.0887617610418667);
    let kn = |t: &Tensor| kaiming_normal_(t, 0.0, FanMode::FanIn, "relu");
    close(seeded(3, &[5, 7], f, kn), 0.614377451900925);
    close(seeded(4, &[1000], f, |t| trunc_normal_(t, 0.5, 2.0, -1.0, 3.0)), 433.26829408571126);
    close(seeded(9, &[300], f, |t| trunc_normal_(t, 0.0, 1.0, 1.0, 3.0)), 230.84013402263324);
    close(seeded(10, &[50], Kind::Double, |t| trunc_normal_(t, 0.0, 1.0, -2.0, 2.0)), -0.5741171831792997);
    close(seeded(5, &[3, 7], f, |t| orthogonal_(t, 2.0)), -0.19455409049987793);
    close(seeded(6, &[6, 2, 1], f, |t| orthogonal_(t, 1.0)), 0.28441728837788105);
    close(seeded(7, &[10], Kind::Double, |t| inplace::uniform_(t, -2.0, 3.0)), 6.243837720587275);
    close(seeded(8, &[10], f, |t| inplace::normal_(t, 1.0, 0.5)), 3.848563453555107);
}
