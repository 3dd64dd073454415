"""The image self-test: `python -m trainer.smoke` proves an image can train before anyone pays for
a GPU hour with it.

It runs inside the freshly built image in CodeBuild (no GPU there: it checks the build itself) and
can run on any node (GPU, EFA). Every check prints one line; any failure prints what was expected
and what was found, and the exit code is 1. What it checks:

- versions: torch, the CUDA it was built for, cuDNN, and the NCCL it actually loads. The NCCL
  library is compared with the `nvidia-nccl-cu*` wheel torch was installed with: a different
  `libnccl.so.2` picked up through LD_LIBRARY_PATH (a base image's or a plugin's) is the classic
  silent mismatch.
- the EFA libfabric provider when the node has EFA (`/dev/infiniband/uverbs*` present, or
  `FI_PROVIDER=efa`): `fi_info -p efa` must list it, and the aws-ofi-nccl plugin must be there.
- every module of the trainer package imports (a dependency missing from the image's lock
  shows up here, not in the first pod);
- every directory written at run time (temporary files, compile, Triton, Hugging Face and CUDA
  caches) is writable, as it must be under the pods' read-only root filesystem;
- a tiny forward/backward of the trainer's own model on the device present, and a one-rank
  all-reduce through the collective backend the trainer would use (NCCL on CUDA, gloo on CPU).

Options default from TRAINSTACK_SMOKE_* environment variables so the image can bake its
expectations in (see images/trainer/Dockerfile) and a pod can still override them.
"""

from __future__ import annotations

import argparse
import getpass
import glob
import importlib.metadata
import os
import pkgutil
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace

import trainer
from contract.model.args import MODEL_PRESETS

EXIT_FAILED = 1
EFA_DEVICE_GLOB = "/dev/infiniband/uverbs*"
OFI_NCCL_PLUGIN = "libnccl-net-ofi.so"
OFI_NCCL_DEFAULT_DIRS = (
    "/opt/amazon/ofi-nccl/lib",  # recent EFA installers
    "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",  # older installers on Ubuntu
)
FI_INFO_DEFAULT = "/opt/amazon/efa/bin/fi_info"


class SmokeFailure(Exception):
    """A check found the image or node unfit; the message says expected vs found."""


@dataclass(frozen=True)
class SmokeOptions:
    device: str = "auto"
    """auto (CUDA when present, else CPU), cpu, or cuda (fail when no GPU is visible)."""
    expect_cuda: str | None = None
    """CUDA major.minor torch must be built for, e.g. 13.0; `cpu` for a CPU-only build."""
    expect_nccl: str | None = None
    """Exact NCCL version torch must load, e.g. 2.29.7 (default: the nvidia-nccl wheel's)."""
    efa: str = "auto"
    """auto (check when the node looks like EFA), require, or skip."""


DEVICE_CHOICES = ("auto", "cpu", "cuda")
EFA_CHOICES = ("auto", "require", "skip")


def parse_args(argv: list[str] | None) -> SmokeOptions:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m trainer.smoke", description=__doc__)
    parser.add_argument(
        "--device", choices=DEVICE_CHOICES, default=env("TRAINSTACK_SMOKE_DEVICE", "auto")
    )
    parser.add_argument("--expect-cuda", default=env("TRAINSTACK_SMOKE_EXPECT_CUDA") or None)
    parser.add_argument("--expect-nccl", default=env("TRAINSTACK_SMOKE_EXPECT_NCCL") or None)
    parser.add_argument("--efa", choices=EFA_CHOICES, default=env("TRAINSTACK_SMOKE_EFA", "auto"))
    args = parser.parse_args(argv)
    # argparse checks `choices` for typed values only, not for defaults from the environment.
    for variable, value, allowed in (
        ("TRAINSTACK_SMOKE_DEVICE", args.device, DEVICE_CHOICES),
        ("TRAINSTACK_SMOKE_EFA", args.efa, EFA_CHOICES),
    ):
        if value not in allowed:
            parser.error(f"{variable}={value!r}: allowed: {', '.join(allowed)}")
    return SmokeOptions(args.device, args.expect_cuda, args.expect_nccl, args.efa)


def _installed_nccl_wheel() -> tuple[str, str] | None:
    """(distribution, version) of the nvidia-nccl wheel torch depends on, if installed."""
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_versions(opts: SmokeOptions) -> str:
    import torch  # lazy: a broken torch fails this check only

    built_for = torch.version.cuda  # None on CPU-only builds
    if opts.expect_cuda is not None:
        wanted = opts.expect_cuda.lower()
        if wanted == "cpu" and built_for is not None:
            raise SmokeFailure(
                f"expected a CPU-only torch build, found one built for CUDA {built_for}"
            )
        if wanted != "cpu" and built_for is None:
            raise SmokeFailure(
                f"expected torch built for CUDA {opts.expect_cuda}, found a CPU-only build "
                f"(torch {torch.__version__}): the image installed the wrong wheel"
            )
        if wanted != "cpu" and built_for.split(".")[:2] != wanted.split(".")[:2]:
            raise SmokeFailure(
                f"expected torch built for CUDA {opts.expect_cuda}, found CUDA {built_for} "
                f"(torch {torch.__version__})"
            )
    parts = [f"torch {torch.__version__}", f"CUDA {built_for or 'none (CPU build)'}"]
    if built_for is not None:
        parts.append(f"cuDNN {torch.backends.cudnn.version()}")
    return ", ".join(parts)


def check_nccl(opts: SmokeOptions) -> str:
    import torch  # lazy: a broken torch fails this check only

    nccl_version = getattr(torch._C, "_nccl_version", None)
    if nccl_version is None:
        if opts.expect_nccl:
            raise SmokeFailure(
                f"expected NCCL {opts.expect_nccl}, but torch {torch.__version__} has no NCCL"
            )
        return "not built with NCCL (CPU build): skipped"
    loaded = ".".join(str(p) for p in torch.cuda.nccl.version())
    wheel = _installed_nccl_wheel()
    if opts.expect_nccl and loaded != opts.expect_nccl:
        raise SmokeFailure(f"expected NCCL {opts.expect_nccl}, torch loaded NCCL {loaded}")
    if wheel is not None and wheel[1].split(".")[:3] != loaded.split("."):
        raise SmokeFailure(
            f"torch loaded NCCL {loaded} but was installed with {wheel[0]}=={wheel[1]}: another "
            f"libnccl.so.2 shadows it (LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')!r})"
        )
    source = f"matches {wheel[0]}=={wheel[1]}" if wheel else "no nvidia-nccl wheel to compare"
    return f"NCCL {loaded} ({source})"


def check_trainer_imports(opts: SmokeOptions) -> str:
    skipped = {"trainer.__main__", "trainer.smoke"}  # the entry point runs on import; this file
    names = [
        module.name
        for module in pkgutil.walk_packages(trainer.__path__, prefix="trainer.")
        if module.name not in skipped
    ]
    broken = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            broken.append(f"{name} ({error})")
    if broken:
        raise SmokeFailure(f"trainer modules fail to import: {'; '.join(broken)}")
    return f"{len(names)} trainer modules import"


def _efa_expected(opts: SmokeOptions) -> str | None:
    if opts.efa == "require":
        return "--efa require"
    if opts.efa == "skip":
        return None
    if glob.glob(EFA_DEVICE_GLOB):
        return f"EFA devices present ({EFA_DEVICE_GLOB})"
    if os.environ.get("FI_PROVIDER", "").lower() == "efa":
        return "FI_PROVIDER=efa"
    return None


def _find_ofi_nccl_plugin() -> str | None:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for directory in [*dirs, *OFI_NCCL_DEFAULT_DIRS]:
        candidate = os.path.join(directory, OFI_NCCL_PLUGIN)
        if os.path.exists(candidate):
            return candidate
    return None


def check_efa(opts: SmokeOptions) -> str:
    reason = _efa_expected(opts)
    if reason is None:
        return "no EFA on this node: skipped"
    fi_info = shutil.which("fi_info") or (
        FI_INFO_DEFAULT if os.access(FI_INFO_DEFAULT, os.X_OK) else None
    )
    if fi_info is None:
        raise SmokeFailure(
            f"EFA expected ({reason}) but fi_info is not installed: the image lacks libfabric "
            f"from the EFA installer"
        )
    result = subprocess.run(
        [fi_info, "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip().splitlines()
        detail = output[-1] if output else f"exit {result.returncode}"
        raise SmokeFailure(
            f"EFA expected ({reason}) but `fi_info -p efa` failed: {detail} (is the EFA device "
            f"plugin's vpc.amazonaws.com/efa resource requested?)"
        )
    plugin = _find_ofi_nccl_plugin()
    if plugin is None:
        raise SmokeFailure(
            f"EFA expected ({reason}) but the aws-ofi-nccl plugin {OFI_NCCL_PLUGIN} is not on "
            f"LD_LIBRARY_PATH or in {', '.join(OFI_NCCL_DEFAULT_DIRS)}: NCCL would fall back to "
            f"TCP sockets"
        )
    return f"libfabric efa provider ok ({reason}); NCCL plugin {plugin}"


def locked_memory_limit() -> int:
    """This process's soft RLIMIT_MEMLOCK in bytes (resource.RLIM_INFINITY: unlimited)."""
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


def check_memlock(opts: SmokeOptions) -> str:
    """libfabric's EFA provider pins (mlocks) its buffers; a finite limit fails registration
    at scale. Pods get the node's container-runtime default (EKS AMIs: unlimited), since they
    drop every capability and cannot raise it themselves."""
    reason = _efa_expected(opts)
    if reason is None:
        return "no EFA on this node: skipped"
    limit = locked_memory_limit()
    if limit != resource.RLIM_INFINITY:
        raise SmokeFailure(
            f"EFA expected ({reason}) but the locked-memory limit is {limit} bytes, expected "
            "unlimited (set the container runtime's default memlock ulimit to unlimited)"
        )
    return f"locked-memory limit unlimited ({reason})"


def _pick_device(opts: SmokeOptions):
    import torch  # lazy: a broken torch fails this check only

    if opts.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", 0)


def check_device(opts: SmokeOptions) -> str:
    import torch  # lazy: a broken torch fails this check only

    if opts.device == "cuda" and not torch.cuda.is_available():
        raise SmokeFailure(
            f"expected CUDA but torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda}; NVIDIA_VISIBLE_DEVICES="
            f"{os.environ.get('NVIDIA_VISIBLE_DEVICES', 'unset')}): no GPU visible or the driver "
            f"is too old"
        )
    device = _pick_device(opts)
    if device.type == "cuda":
        count = torch.cuda.device_count()
        return f"{count} x {torch.cuda.get_device_name(device)}"
    return "cpu" + (" (CUDA not available)" if opts.device == "auto" else "")


def check_train_step(opts: SmokeOptions) -> str:
    import torch  # lazy: a broken torch fails this check only

    device = _pick_device(opts)
    torch.manual_seed(0)
    # The tiny preset, shrunk further: the point is that every kernel the trainer uses runs.
    args = replace(MODEL_PRESETS["tiny"], dim=64, n_layers=2, n_heads=4, n_kv_heads=2)
    args = replace(args, ffn_hidden_dim=128, max_seq_len=64)
    model = _build_model(args, device)
    tokens = torch.randint(0, args.vocab_size, (2, 33), device=device)
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, args.vocab_size), tokens[:, 1:].reshape(-1)
    )
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    if not torch.isfinite(loss) or any(g is None or not torch.isfinite(g).all() for g in grads):
        raise SmokeFailure(f"forward/backward on {device} produced a non-finite loss or gradient")
    if device.type == "cuda":
        torch.cuda.synchronize()
    return f"loss {loss.item():.3f} on {device}"


def _build_model(args, device):
    import torch  # lazy: a broken torch fails this check only

    from trainer.model.model import Transformer  # lazy: a broken torch fails this check only

    # The trainer's own path: build on meta, allocate, then fill deterministically.
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device=device)
    model.init_weights(seed=0)
    return model


def check_collective(opts: SmokeOptions) -> str:
    import torch  # lazy: a broken torch fails this check only
    import torch.distributed as dist  # lazy: a broken torch fails this check only

    device = _pick_device(opts)
    backend = "nccl" if device.type == "cuda" else "gloo"
    store = dist.HashStore()  # one rank, in-process: no ports, no environment needed
    dist.init_process_group(backend, store=store, rank=0, world_size=1)
    try:
        value = torch.ones(4, device=device)
        dist.all_reduce(value)
        if value.sum().item() != 4.0:
            raise SmokeFailure(f"{backend} all_reduce over one rank changed the tensor: {value}")
    finally:
        dist.destroy_process_group()
    return f"{backend} all_reduce on {device.type} ok"


def cache_dirs() -> dict[str, str]:
    """Where the trainer and its libraries write at run time, as this environment resolves it:
    temporary files (tokenizer staging), torch.compile's and Triton's caches, the Hugging Face
    cache, CUDA's JIT cache."""
    home = os.path.expanduser("~")
    env = os.environ.get
    try:
        temporary = tempfile.gettempdir()
    except FileNotFoundError:
        temporary = env("TMPDIR") or "/tmp"
    xdg_cache = env("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return {
        "TMPDIR": temporary,
        "TORCHINDUCTOR_CACHE_DIR": env("TORCHINDUCTOR_CACHE_DIR")
        or os.path.join(temporary, f"torchinductor_{getpass.getuser()}"),
        "TRITON_CACHE_DIR": env("TRITON_CACHE_DIR") or os.path.join(home, ".triton", "cache"),
        "HF_HOME": env("HF_HOME") or os.path.join(xdg_cache, "huggingface"),
        "CUDA_CACHE_PATH": env("CUDA_CACHE_PATH") or os.path.join(home, ".nv", "ComputeCache"),
    }


def _writable(path: str) -> bool:
    """Whether `path` can be written, or made under its nearest existing ancestor (nothing is
    created: access(2) answers EROFS on a read-only filesystem, even for root)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)


def check_writable_dirs(opts: SmokeOptions) -> str:
    """Pods run with a read-only root filesystem (jobs/backends/kubernetes/manifests.py): every
    directory written
    at run time must be on a writable mount (the pod's /tmp emptyDir, HOME under it)."""
    for variable, path in cache_dirs().items():
        if not _writable(path):
            raise SmokeFailure(
                f"{path} ({variable}) is not writable: with a read-only root filesystem it "
                "must be under a writable mount (the pods mount an emptyDir at /tmp and set "
                "HOME=/tmp/home)"
            )
    return "temporary and cache directories writable"


CHECKS: tuple[tuple[str, Callable[[SmokeOptions], str]], ...] = (
    ("versions", check_versions),
    ("nccl", check_nccl),
    ("trainer_imports", check_trainer_imports),
    ("efa", check_efa),
    ("memlock", check_memlock),
    ("writable_dirs", check_writable_dirs),
    ("device", check_device),
    ("train_step", check_train_step),
    ("collective", check_collective),
)
NEEDS_DEVICE = frozenset({"train_step", "collective"})


def run_checks(opts: SmokeOptions) -> list[str]:
    """Run every check, print one line each, and return the failures' messages."""
    failures = []
    for name, check in CHECKS:
        if name in NEEDS_DEVICE and any(f.startswith("device:") for f in failures):
            print(f"skip {name}: the device check failed", flush=True)
            continue
        try:
            detail = check(opts)
        except SmokeFailure as failure:
            failures.append(f"{name}: {failure}")
            print(f"FAIL {name}: {failure}", flush=True)
        except Exception as error:  # a broken image may fail anywhere: report it, keep going
            failures.append(f"{name}: {type(error).__name__}: {error}")
            print(f"FAIL {name}: unexpected {type(error).__name__}: {error}", flush=True)
        else:
            print(f"ok   {name}: {detail}", flush=True)
    return failures


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    failures = run_checks(opts)
    if failures:
        print(f"smoke test failed: {len(failures)} of {len(CHECKS)} checks", file=sys.stderr)
        return EXIT_FAILED
    print(f"smoke test passed: {len(CHECKS)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
