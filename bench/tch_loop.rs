//! The reference contender "tch-loop": a hand-written training loop on tch
//! (libtorch's kernels, no fulmen), following bench/PROTOCOL.md. It is the
//! floor fulmen's trainer is measured against.
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
}

fn parse_args() -> Args {
    let mut a = Args {
        workload: "mlp64".into(),
        data: ".deps/data/mnist_5k.csv.gz".into(),
        epochs: 5,
        warmup: 1,
        threads: 1,
        seed: 0,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v = argv[i + 1].clone();
        match argv[i].as_str() {
            "--workload" => a.workload = v,
            "--data" => a.data = v,
            "--epochs" => a.epochs = v.parse().expect("--epochs"),
            "--warmup" => a.warmup = v.parse().expect("--warmup"),
            "--threads" => a.threads = v.parse().expect("--threads"),
            "--seed" => a.seed = v.parse().expect("--seed"),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
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
        other => panic!("unknown workload {other}"),
    }
}

fn main() {
    let a = parse_args();
    tch::set_num_threads(a.threads);
    tch::manual_seed(a.seed);
    let (x, y) = load(&a.data);
    let vs = nn::VarStore::new(Device::Cpu);
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
            let (bx, by) = (x.index_select(0, &idx), y.index_select(0, &idx));
            opt.zero_grad();
            let loss = net.forward(&bx).cross_entropy_for_logits(&by);
            loss.backward();
            opt.step();
            steps += 1;
            first += len;
        }
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
