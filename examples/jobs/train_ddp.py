"""A data-parallel PyTorch training job for a gpufleet cluster, the one `gpufleet validate` runs as its
training check (docs/training.md). Copy it with train.sbatch and put your model and data in place of the
synthetic ones; keep the rest: rendezvous, checkpoints, resume, the stop on a signal.

Launched by torchrun on every node (train.sbatch): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE. The backend is
NCCL where CUDA is available, gloo otherwise (CPU nodes, the local cluster).

- Data: seeded and synthetic, a function of (seed, rank, step) only, so a resumed run sees exactly the
  batches an uninterrupted one would; nothing is downloaded.
- Checkpoints (torch.distributed.checkpoint, every --checkpoint-every steps and when stopped): written by all
  ranks into <dir>/.tmp-step-N-<job>, then rank 0 writes COMPLETE there and renames the folder to
  <dir>/step-N. A folder without COMPLETE (a job killed mid-write) is never read. At start the job resumes
  from the newest complete step-N. Before the first step rank 0 checks that the folder's filesystem holds
  --keep checkpoints plus the one being written; when it does not, it prints a `no_space` event (path,
  bytes needed and available) and every rank exits with NO_SPACE_EXIT, having trained nothing.
- Stopping: SIGUSR1 (sbatch --signal=USR1@N) or SIGTERM (scancel, preemption, torchrun passing one on) sets
  a flag; the ranks agree on it at the next step (an all-reduce of the flag), write a checkpoint, rank 0
  writes <dir>/STOPPED and they exit with STOP_EXIT; train.sbatch then requeues the job. A finished run
  writes <dir>/DONE.
- Measurements, printed as one JSON line per rank and event after `GPUFLEET_TRAIN ` (what the training
  check reads; under `gpufleet validate`, TRAIN_EVENT_PARTS=1 sends a long one in short parts):
  time to join the process group and to the first step, per-step times, each rank's own compute time
  (forward+backward without the all-reduce) and the time of a gradient-sized broadcast from it (its link),
  DDP's all-reduce per bucket (a communication hook times each one), the loss, a hash of the parameters,
  and the checkpoint's write and read-back.

Stdlib and torch only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.time()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402

MARKER = "GPUFLEET_TRAIN "
STOP_EXIT = 3  # the ranks checkpointed on a signal: requeue me
NO_SPACE_EXIT = 4  # the checkpoint folder's filesystem cannot hold the checkpoints: nothing was trained
COMPLETE = "COMPLETE"

_stop_requested = False


def _request_stop(signum: int, _frame: Any) -> None:
    global _stop_requested
    _stop_requested = True
    print(
        f"rank {os.environ.get('RANK')}: signal {signal.Signals(signum).name}, stopping at the next step",
        file=sys.stderr,
        flush=True,
    )


PART_MARKER = "GPUFLEET_TRAIN_PART "
PART_CHARS = 768  # Slurm forwards a task's output in messages of at most 1 KiB: a longer line is cut there
_emitted = [0]


def emit(kind: str, **data: Any) -> None:
    """One line per event, each in one write(2), so ranks sharing an output file do not interleave inside
    it. Slurm forwards a task's output in messages of at most 1 KiB (SLURM_IO_MAX_MSG_LEN in src/common/
    io_hdr.h), so another task's line can land inside a longer one (seen in CI: a summary cut at byte 1024):
    a long event goes as base64 parts, ``GPUFLEET_TRAIN_PART <id> <i> <n> <chunk>``, each a short line.
    The id names the rank, its node, the process and the job's restart: every node is its own PID namespace
    (a container, or the same boot order on identical machines), so a process id alone repeats across nodes,
    and two ranks' parts with one id were put together into neither (CI: "rank(s) 3 printed no summary" from
    a job that exited 0)."""
    sys.stdout.flush()
    text = json.dumps({"kind": kind, **data}, sort_keys=True)
    # Run by hand, each event is one line (through srun, a line over 1 KiB reaches the job's log cut into
    # labelled pieces: Slurm forwards output in 1 KiB messages); `gpufleet validate` sets TRAIN_EVENT_PARTS=1
    # and reads the parts back together.
    if len(text) + len(MARKER) < PART_CHARS or os.environ.get("TRAIN_EVENT_PARTS") != "1":
        lines = [MARKER + text]
    else:
        _emitted[0] += 1
        ident = ".".join(
            (
                os.environ.get("RANK", "-"),
                socket.gethostname().split(".")[0] or "-",
                str(os.getpid()),
                os.environ.get("SLURM_RESTART_COUNT", "0"),
                str(_emitted[0]),
            )
        )
        encoded = base64.b64encode(text.encode()).decode()
        chunks = [encoded[at : at + PART_CHARS] for at in range(0, len(encoded), PART_CHARS)]
        lines = [f"{PART_MARKER}{ident} {i} {len(chunks)} {chunk}" for i, chunk in enumerate(chunks)]
    for line in lines:
        os.write(sys.stdout.fileno(), (line + "\n").encode())


def parameter_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def batch(seed: int, rank: int, step: int, size: int, features: int, device: torch.device) -> tuple:
    """This rank's batch at this step: a function of (seed, rank, step) only."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + step)
    inputs = torch.randn(size, features, generator=generator)
    teacher = torch.Generator().manual_seed(seed)
    weights = torch.randn(features, 10, generator=teacher)
    return inputs.to(device), (inputs @ weights).argmax(1).to(device)


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    found = []
    for path in root.glob("step-*"):
        if (path / COMPLETE).is_file() and path.name[5:].isdigit():
            found.append((int(path.name[5:]), path))
    return sorted(found)


def folder_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rank: int,
    keep: int,
    job: str,
) -> dict[str, Any]:
    """Write step ``step`` atomically (temporary folder, COMPLETE, rename); returns size and time."""
    tmp = root / f".tmp-step-{step:08d}-{job}"
    final = root / f"step-{step:08d}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    started = time.perf_counter()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state, "step": torch.tensor(step)}, checkpoint_id=str(tmp))
    dist.barrier()
    info: dict[str, Any] = {"step": step, "path": str(final)}
    if rank == 0:
        marker = tmp / COMPLETE
        with marker.open("w") as handle:
            json.dump({"step": step, "world": dist.get_world_size(), "hash": parameter_hash(model)}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        directory = os.open(root, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        for _old_step, old in complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        info["bytes"] = folder_bytes(final)
    dist.barrier()
    info["write_s"] = time.perf_counter() - started
    return info


def checkpoint_room(root: Path, model: torch.nn.Module, keep: int) -> dict[str, Any] | None:
    """Before the first step: whether the checkpoint folder's filesystem holds ``keep`` complete checkpoints
    plus the one being written. A checkpoint is the parameters and SGD's momentum buffer of each (twice the
    parameters' bytes; DCP's metadata is a few KB more). None when it fits; else what the check reports."""
    size = 2 * sum(p.numel() * p.element_size() for p in model.parameters())
    needed = (keep + 1) * size
    stats = os.statvfs(root)
    available = stats.f_bavail * stats.f_frsize
    if available >= needed:
        return None
    return {
        "path": str(root),
        "needed": needed,
        "available": available,
        "checkpoint_bytes": size,
        "keep": keep,
    }


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["step"])


def build(hidden: int, device: torch.device, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)
    ).to(device)
    return model


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("TRAIN_STEPS", 60)))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TRAIN_CHECKPOINT_DIR", ""))
    parser.add_argument(
        "--checkpoint-every", type=int, default=int(os.environ.get("TRAIN_CHECKPOINT_EVERY", 20))
    )
    parser.add_argument("--keep", type=int, default=2, help="complete checkpoints kept")
    parser.add_argument("--hidden", type=int, default=int(os.environ.get("TRAIN_HIDDEN", 512)))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--probes", type=int, default=10, help="steps timed without the all-reduce")
    parser.add_argument(
        "--step-delay",
        type=float,
        default=float(os.environ.get("TRAIN_STEP_DELAY", 0)),
        help="seconds of sleep per step (tests: a job long enough to be interrupted)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGUSR1, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)

    host = socket.gethostname()
    job = os.environ.get("SLURM_JOB_ID", "nojob")
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    interface = os.environ.get("NCCL_SOCKET_IFNAME" if use_cuda else "GLOO_SOCKET_IFNAME", "")
    emit(
        "start",
        rank=int(os.environ.get("RANK", -1)),
        host=host,
        backend=backend,
        interface=interface,
        restart=int(os.environ.get("SLURM_RESTART_COUNT", 0)),
        job=job,
    )

    joining = time.time()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    join_s = time.time() - joining
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host)
    emit("join", rank=rank, world=world, host=host, join_s=round(join_s, 4), hosts=hosts)

    model = build(args.hidden, device, args.seed)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    allreduce: list[tuple[int, float]] = []

    # Unannotated: DDP checks the hook's annotations at run time, and this module's are strings.
    def timed_allreduce(_state, bucket):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        started = time.perf_counter()
        size = bucket.buffer().numel() * bucket.buffer().element_size()
        work = dist.all_reduce(bucket.buffer().div_(world), async_op=True)
        future = work.get_future()

        def done(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            if use_cuda:
                torch.cuda.synchronize(device)
            allreduce.append((size, time.perf_counter() - started))
            return fut.value()[0]

        return future.then(done)

    ddp.register_comm_hook(None, timed_allreduce)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()

    root = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    start_step, resumed = 0, None
    if root is not None:
        short: list[Any] = [None]
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            for stale in root.glob(".tmp-step-*"):  # a write a killed job never finished
                shutil.rmtree(stale, ignore_errors=True)
            (root / "STOPPED").unlink(missing_ok=True)
            short[0] = checkpoint_room(root, model, args.keep)
        dist.broadcast_object_list(short, src=0)
        if short[0] is not None:
            # Not a step is run that could not be kept: every rank stops before training, and says why.
            if rank == 0:
                emit("no_space", rank=rank, host=host, **short[0])
            dist.destroy_process_group()
            return NO_SPACE_EXIT
        dist.barrier()
        choice: list[Any] = [str(complete_checkpoints(root)[-1][1]) if complete_checkpoints(root) else None]
        dist.broadcast_object_list(choice, src=0)
        if choice[0]:
            start_step = load_checkpoint(Path(choice[0]), ddp, optimizer)
            resumed = choice[0]
    emit("resume", rank=rank, start_step=start_step, path=resumed)

    step_s: list[float] = []
    losses: list[tuple[int, float]] = []
    checkpoints: list[dict[str, Any]] = []
    first_step_at = None
    step = start_step
    stopped = False
    flag = torch.zeros(1, device=device)
    while step < args.steps:
        began = time.perf_counter()
        inputs, labels = batch(args.seed, rank, step, args.batch, 256, device)
        optimizer.zero_grad(set_to_none=True)
        loss = lossf(ddp(inputs), labels)
        loss.backward()
        optimizer.step()
        if use_cuda:
            torch.cuda.synchronize(device)
        step += 1
        step_s.append(time.perf_counter() - began)
        losses.append((step, loss.item()))
        if first_step_at is None:
            first_step_at = time.time()
        if args.step_delay:
            time.sleep(args.step_delay)
        flag.fill_(1.0 if _stop_requested else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stopped = bool(flag.item())
        if root is not None and (stopped or step % args.checkpoint_every == 0 or step == args.steps):
            saved = save_checkpoint(root, step, ddp, optimizer, rank, args.keep, job)
            checkpoints.append(saved)
            if rank == 0:
                emit("checkpoint", rank=rank, **saved)
        if stopped:
            break

    summary: dict[str, Any] = {
        "rank": rank,
        "world": world,
        "host": host,
        "backend": backend,
        "interface": interface,
        "device": str(device),
        "job": job,
        "join_s": round(join_s, 4),
        "start_step": start_step,
        "resumed_from": resumed,
        "steps_run": len(step_s),
        "last_step": step,
        "stopped": stopped,
        "time_to_first_step_s": round((first_step_at or time.time()) - STARTED, 3),
        "step_s": [round(value, 6) for value in step_s],
        "first_loss": losses[0][1] if losses else None,
        "last_loss": losses[-1][1] if losses else None,
        "param_hash": parameter_hash(model),
    }
    if not stopped:
        summary.update(probe(ddp, args, rank, world, device, lossf, use_cuda))
        summary["allreduce"] = [{"bytes": size, "s": round(sec, 6)} for size, sec in allreduce[-20:]]
        if root is not None and checkpoints:
            summary["checkpoint"] = readback(checkpoints[-1], args, device, rank, model)
    hashes: list[Any] = [None] * world
    dist.all_gather_object(hashes, summary["param_hash"])
    summary["hashes"] = hashes
    emit("summary", **summary)
    if rank == 0 and root is not None:
        # What train.sbatch reads once torchrun is back: finished (DONE), or stopped to be requeued (STOPPED).
        (root / ("STOPPED" if stopped else "DONE")).write_text(
            json.dumps({"step": step, "hash": summary["param_hash"], "job": job}) + "\n"
        )
    dist.barrier()
    dist.destroy_process_group()
    return STOP_EXIT if stopped else 0


def probe(
    ddp: torch.nn.parallel.DistributedDataParallel,
    args: argparse.Namespace,
    rank: int,
    world: int,
    device: torch.device,
    lossf: torch.nn.Module,
    use_cuda: bool,
) -> dict[str, Any]:
    """Each rank's own share of a step, measured apart (in a DDP step every rank waits for the slowest, so
    the step's wall time is the same everywhere): compute without the all-reduce (no_sync), and a
    gradient-sized broadcast from each rank in turn (its link), the slowest receiver's time for each."""
    compute = []
    for index in range(args.probes):
        inputs, labels = batch(args.seed + 1, rank, index, args.batch, 256, device)
        began = time.perf_counter()
        with ddp.no_sync():
            lossf(ddp(inputs), labels).backward()
        if use_cuda:
            torch.cuda.synchronize(device)
        compute.append(time.perf_counter() - began)
    ddp.zero_grad(set_to_none=True)
    grad_bytes = sum(p.numel() * p.element_size() for p in ddp.parameters())
    buffer = torch.ones(grad_bytes // 4, device=device)
    send = torch.zeros(world, device=device)
    for source in range(world):
        times = []
        for _ in range(3):
            dist.barrier()
            began = time.perf_counter()
            dist.broadcast(buffer, src=source)
            if use_cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - began)
        send[source] = median(times)
    dist.all_reduce(send, op=dist.ReduceOp.MAX)
    return {
        "compute_s": round(median(compute), 6),
        "grad_bytes": grad_bytes,
        "broadcast_s": [round(float(value), 6) for value in send.tolist()],
    }


def readback(
    saved: dict[str, Any], args: argparse.Namespace, device: torch.device, rank: int, model: torch.nn.Module
) -> dict[str, Any]:
    """Load the last checkpoint into a fresh model and optimizer; equal when the parameters hash the same."""
    fresh = build(args.hidden, device, args.seed + 99)
    fresh_ddp = torch.nn.parallel.DistributedDataParallel(
        fresh, device_ids=[device.index] if device.index is not None else None
    )
    fresh_optimizer = torch.optim.SGD(fresh_ddp.parameters(), lr=args.lr, momentum=0.9)
    dist.barrier()
    began = time.perf_counter()
    step = load_checkpoint(Path(saved["path"]), fresh_ddp, fresh_optimizer)
    dist.barrier()
    read_s = time.perf_counter() - began
    result = {
        "path": saved["path"],
        "step": step,
        "write_s": round(saved["write_s"], 6),
        "read_s": round(read_s, 6),
        "equal": parameter_hash(fresh) == parameter_hash(model),
    }
    if rank == 0:
        result["bytes"] = saved.get("bytes")
    return result


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The work is done and the process group destroyed. torch 2.13's CPU build can still abort in its C++
    # teardown at interpreter exit ("terminate called without an active exception", exit -6: seen once in
    # CI on a rank that had finished all steps and written its summary), which fails the job for nothing;
    # leave without running that teardown.
    os._exit(code)
