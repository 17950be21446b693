//! The reference contender "tch-loop": a hand-written training loop on tch
//! (libtorch's kernels, no fulmen), following bench/PROTOCOL.md. It is the
//! floor fulmen's trainer is measured against. `--accelerator cuda` trains
//! on cuda:0, each epoch's clock read after the GPU's queued work is done.
use std::io::Read;
use std::time::Instant;
use tch::{nn, nn::Module, nn::OptimizerConfig, Device, Kind, Tensor};

struct Args {
    workload: String,
    data: String,
    epochs: usize,
    warmup: usize,
    threads: i32,
    seed: i64,
    device: Device,
}

/// Ends the program on a bad argument, with the usage (exit status 2).
fn usage(problem: &str) -> ! {
    eprintln!(
        "tch_loop: {problem}\nusage: tch_loop [--workload mlp64|mlp1024|cnn] [--data PATH] [--epochs N] \
         [--warmup N] [--threads N] [--seed N] [--accelerator cpu|cuda]"
    );
    std::process::exit(2);
}

/// The value of a numeric argument.
fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value.parse().unwrap_or_else(|_| usage(&format!("{flag} {value:?} is not a number")))
}

/// The arguments of bench/PROTOCOL.md, every one as `--name value`.
fn parse_args() -> Args {
    let mut a = Args {
        workload: "mlp64".into(),
        data: ".deps/data/mnist_5k.csv.gz".into(),
        epochs: 5,
        warmup: 1,
        threads: 1,
        seed: 0,
        device: Device::Cpu,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let Some(v) = argv.next() else { usage(&format!("{flag} needs a value")) };
        match flag.as_str() {
            "--workload" => a.workload = v,
            "--data" => a.data = v,
            "--epochs" => a.epochs = number(&flag, &v),
            "--warmup" => a.warmup = number(&flag, &v),
            "--threads" => a.threads = number(&flag, &v),
            "--seed" => a.seed = number(&flag, &v),
            "--accelerator" => {
                a.device = match v.as_str() {
                    "cpu" => Device::Cpu,
                    "cuda" if tch::Cuda::is_available() => Device::Cuda(0),
                    "cuda" => usage("--accelerator cuda: libtorch sees no CUDA device here"),
                    other => usage(&format!("--accelerator {other:?}: expected cpu or cuda")),
                }
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    a
}

/// Pixels scaled by 1/255 and labels (the last column) of the gzip CSV.
fn load(path: &str) -> (Tensor, Tensor) {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).expect("opening the data"))
        .read_to_string(&mut text)
        .expect("reading the data");
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let cols: Vec<f32> = line.split(',').map(|c| c.trim().parse().expect("a number")).collect();
        let (label, px) = cols.split_last().expect("a row");
        pixels.extend(px.iter().map(|p| p / 255.0));
        labels.push(*label as i64);
    }
    let n = labels.len() as i64;
    (Tensor::from_slice(&pixels).view([n, 784]), Tensor::from_slice(&labels))
}

fn model(vs: &nn::Path, workload: &str) -> nn::Sequential {
    match workload {
        "mlp64" | "mlp1024" => {
            let h = if workload == "mlp64" { 64 } else { 1024 };
            nn::seq().add(nn::linear(vs / "0", 784, h, Default::default())).add_fn(|x| x.relu()).add(nn::linear(
                vs / "2",
                h,
                10,
                Default::default(),
            ))
        }
        "cnn" => {
            let conv = nn::ConvConfig { padding: 1, ..Default::default() };
            nn::seq()
                .add_fn(|x| x.view([-1, 1, 28, 28]))
                .add(nn::conv2d(vs / "0", 1, 16, 3, conv))
                .add_fn(|x| x.relu().max_pool2d_default(2))
                .add(nn::conv2d(vs / "3", 16, 32, 3, conv))
                .add_fn(|x| x.relu().max_pool2d_default(2).flatten(1, -1))
                .add(nn::linear(vs / "7", 32 * 7 * 7, 10, Default::default()))
        }
        other => usage(&format!("unknown workload {other}")),
    }
}

/// Waits for the work queued on `device` (a GPU's), so that a clock read
/// after it is honest.
fn sync(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

fn main() {
    let a = parse_args();
    tch::set_num_threads(a.threads);
    tch::manual_seed(a.seed);
    let (x, y) = load(&a.data);
    let device = a.device;
    // On a GPU each batch is copied from the host every step, as in the
    // other contenders; on the CPU the batch is used as it is.
    let to_device = |t: Tensor| if device == Device::Cpu { t } else { t.to_device(device) };
    let vs = nn::VarStore::new(device);
    let net = model(&vs.root(), &a.workload);
    let mut opt = nn::Sgd::default().build(&vs, 0.05).expect("SGD");
    let n = y.size()[0];
    let batch = 64;
    for epoch in 0..a.warmup + a.epochs {
        let start = Instant::now();
        let order = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
        let mut steps = 0;
        let mut first = 0;
        while first < n {
            let len = batch.min(n - first);
            let idx = order.narrow(0, first, len);
            let (bx, by) = (to_device(x.index_select(0, &idx)), to_device(y.index_select(0, &idx)));
            opt.zero_grad();
            let loss = net.forward(&bx).cross_entropy_for_logits(&by);
            loss.backward();
            opt.step();
            steps += 1;
            first += len;
        }
        sync(device);
        let seconds = start.elapsed().as_secs_f64();
        if epoch >= a.warmup {
            println!(
                "{{\"contender\": \"tch-loop\", \"workload\": \"{}\", \"epoch\": {epoch}, \"seconds\": {seconds:.6}, \
                 \"steps\": {steps}}}",
                a.workload
            );
        }
    }
    println!("{{\"contender\": \"tch-loop\", \"workload\": \"{}\", \"done\": true}}", a.workload);
}
