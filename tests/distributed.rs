//! Process groups across real processes on loopback: this test binary
//! re-executes itself (the ignored `rank_main` test) once per rank.
use fulmen::distributed::{ProcessGroup, ReduceOp, Rendezvous};
use fulmen::ErrorCode;
use std::process::Command;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

fn rendezvous(rank: usize, world: usize, port: u16, timeout: Duration) -> Rendezvous {
    Rendezvous {
        master_addr: "127.0.0.1".into(),
        master_port: port,
        rank,
        world_size: world,
        all_clients: false,
        timeout,
    }
}

/// Starts `world` copies of this binary running `rank_main` with `scenario`.
fn run_ranks(world: usize, scenario: &str) -> Vec<std::process::Output> {
    let port = fulmen::distributed::launcher::free_port().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .args(["--ignored", "--exact", "rank_main", "--nocapture", "--test-threads=1"])
                .env("FULMEN_TEST_SCENARIO", scenario)
                .env("FULMEN_TEST_RANK", rank.to_string())
                .env("FULMEN_TEST_WORLD", world.to_string())
                .env("FULMEN_TEST_PORT", port.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

fn assert_all_passed(outputs: &[std::process::Output]) {
    for (rank, out) in outputs.iter().enumerate() {
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("RANK-OK"), "rank {rank} failed:\n{text}");
    }
}

#[test]
fn collectives_on_three_ranks() {
    assert_all_passed(&run_ranks(3, "collectives"));
}

/// A step the ranks agree on: rank 1 fails it, so every rank fails, rank 1
/// with its own error, the others naming rank 1's reason; the group goes
/// on after it.
#[test]
fn a_failure_agreed_on_names_the_failed_rank() {
    assert_all_passed(&run_ranks(3, "agree"));
}

#[test]
fn a_rank_that_never_joins_times_out() {
    // Only rank 0 of a world of 2 starts.
    let start = Instant::now();
    let port = fulmen::distributed::launcher::free_port().unwrap();
    let err = match ProcessGroup::new(&rendezvous(0, 2, port, Duration::from_secs(3)), "gloo", 0, None, &|| None) {
        Ok(_) => panic!("a process group of 2 formed with one rank"),
        Err(e) => e,
    };
    assert_eq!(err.code, ErrorCode::Distributed, "{err}");
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
}

#[test]
fn bad_arguments_are_errors() {
    let e = ProcessGroup::new(&rendezvous(2, 2, 1, Duration::from_secs(1)), "gloo", 0, None, &|| None).err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    let e = ProcessGroup::new(&rendezvous(0, 0, 1, Duration::from_secs(1)), "gloo", 0, None, &|| None).err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(ReduceOp::parse("median").unwrap_err().code, ErrorCode::InvalidArgument);
}

/// One rank of a scenario (run by `run_ranks`; does nothing on its own).
#[test]
#[ignore]
fn rank_main() {
    let Ok(scenario) = std::env::var("FULMEN_TEST_SCENARIO") else { return };
    let num = |k: &str| std::env::var(k).unwrap().parse::<usize>().unwrap();
    let (rank, world) = (num("FULMEN_TEST_RANK"), num("FULMEN_TEST_WORLD"));
    let rv = rendezvous(rank, world, num("FULMEN_TEST_PORT") as u16, Duration::from_secs(60));
    let pg = ProcessGroup::new(&rv, "gloo", 0, None, &|| None).unwrap();
    assert_eq!((pg.rank(), pg.world_size(), pg.backend()), (rank, world, "gloo"));
    match scenario.as_str() {
        "collectives" => {
            let w = world as f64;
            let t = Tensor::from_slice(&[rank as f32 + 1.0, 2.0]);
            pg.all_reduce(&[t.shallow_clone()], ReduceOp::Sum).unwrap();
            assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![(w * (w + 1.0) / 2.0) as f32, 2.0 * w as f32]);
            let t = Tensor::from_slice(&[rank as f64]);
            pg.all_reduce(&[t.shallow_clone()], ReduceOp::Mean).unwrap();
            assert_eq!(t.double_value(&[0]), (w - 1.0) / 2.0);
            let t = Tensor::from_slice(&[rank as i64]);
            pg.all_reduce(&[t.shallow_clone()], ReduceOp::Max).unwrap();
            assert_eq!(t.int64_value(&[0]), world as i64 - 1);
            let t = Tensor::full([3], rank as f64 * 10.0, (Kind::Float, Device::Cpu));
            pg.broadcast(&[t.shallow_clone()], world - 1).unwrap();
            assert_eq!(t.double_value(&[2]), (world as f64 - 1.0) * 10.0);
            let g = pg.all_gather(&Tensor::from_slice(&[rank as f32, -(rank as f32)])).unwrap();
            assert_eq!(g.size(), vec![world as i64, 2]);
            assert_eq!(g.double_value(&[world as i64 - 1, 1]), -(world as f64 - 1.0));
            let p = Tensor::full([2, 2], rank as f64, (Kind::Float, Device::Cpu)).set_requires_grad(true);
            pg.broadcast_coalesced(&[p.shallow_clone()], 0).unwrap();
            assert_eq!(p.double_value(&[1, 1]), 0.0);
            pg.verify_params(&[p.shallow_clone()]).unwrap();
            assert_eq!(pg.broadcast(&[t.shallow_clone()], world).unwrap_err().code, ErrorCode::InvalidArgument);
            pg.barrier().unwrap();
        }
        "agree" => {
            assert_eq!(pg.agree(Ok(rank), "a first step").unwrap(), rank);
            let mine = if rank == 1 { Err(fulmen::Error::io("the disk is full on rank 1")) } else { Ok(()) };
            let e = pg.agree(mine, "writing").unwrap_err();
            if rank == 1 {
                assert_eq!(e.code, ErrorCode::Io, "{e}");
                assert!(e.message.contains("writing") && e.message.contains("the disk is full"), "{e}");
            } else {
                assert_eq!(e.code, ErrorCode::Distributed, "{e}");
                assert!(
                    e.message.contains("another rank failed: rank 1 failed: writing: the disk is full on rank 1"),
                    "{e}"
                );
            }
            // Nothing stays behind: the group goes on, and no later error
            // is blamed on this failure.
            assert!(pg.first_failure().is_none());
            assert_eq!(pg.agree(Ok(7), "a later step").unwrap(), 7);
        }
        other => panic!("unknown scenario {other}"),
    }
    println!("RANK-OK {rank}");
}
