"""Start and stop the local cluster: each component a process on 127.0.0.1, started from the
build cache, its id and log kept in the state folder (`.cluster/` by default).

`up` is safe to run twice: a cluster whose processes all still run is left running and only
its objects are applied again (server-side apply); one where some died (a crash, a kill) gets
those restarted, each with the arguments and environment it first had and on the same ports,
and the rest left running (`restart`). `down` stops exactly the processes `up` started (by id,
after checking each id still names the process it started), returns only once every one of
them is gone, and removes the state folder and the stack file it wrote.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from infra.kueue import manager_config
from infra.training_operator import INIT_CONTAINER_KEY, init_container_template, template_flag
from jobs.config_path import user_config_dir
from localcluster import build, manifests, objects, program
from localcluster.certs import Authority, signing_key
from localcluster.engine import EngineError
from localcluster.kube import EXIT_CODE_ANNOTATION, ApiKube, Kube, submitter_pods
from localcluster.versions import (
    ENGINE,
    ETCD,
    JOBSET,
    KUBERAY,
    KUBERNETES,
    KUEUE,
    KWOK,
    TRAINER,
    TRAINING_OPERATOR,
    Component,
)

REPO = Path(__file__).resolve().parents[1]
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
TRAINING_OPERATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_WEBHOOK_HOST = f"training-operator.{TRAINING_OPERATOR_NAMESPACE}.svc"
"""The Training Operator always rotates its webhook certificate (cert-controller) for this
name; it keeps a valid one it finds in its Secret, so the Secret gets ours, which also names
127.0.0.1 (its fixed certificate folder is /tmp/k8s-webhook-server/serving-certs)."""
TRAINING_OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
"""Kueue 0.19 without its certificate rotation loads its metrics certificate from this fixed
folder (cmd/kueue/main.go), even with metrics off: it gets the webhook certificate."""
CONTROLLERS = (JOBSET, TRAINER, KUEUE, TRAINING_OPERATOR)
"""The controllers with a webhook server (each on its own port of 127.0.0.1)."""
RAY_DASHBOARD = "ray-dashboard"
"""The Ray dashboard stand-in (localcluster/ray_dashboard.py): KubeRay's operator reaches it
as its HTTP proxy."""
RAY_FRAMEWORK = "ray.io/rayjob"
"""Kueue's framework name of KubeRay's RayJob."""
START_TIMEOUT_S = 120.0


def default_state_dir() -> Path:
    return Path(os.environ.get("TRAINSTACK_CLUSTER_DIR") or REPO / ".cluster")


@dataclass
class State:
    """What `up` started: process ids (with the binary each runs, when each started, and how
    to start it again) and ports."""

    directory: Path
    pids: dict[str, int] = field(default_factory=dict)
    binaries: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    stack_file: str | None = None
    made_cert_dir: bool = False
    made_dirs: list[str] = field(default_factory=list)
    """Fixed folders outside the state folder that `up` created (removed by `down`)."""
    started: dict[str, str | None] = field(default_factory=dict)
    """name -> its process's start time (`_started_at`): with the id it names one process, so
    an id the kernel has reused since is never taken for it."""
    specs: dict[str, dict] = field(default_factory=dict)
    """name -> how it was started: `argv`, `env` (what was added to the environment of the
    process that ran `up`) and `ready` (a key of READY, or None); its log is logs/<name>.log.
    `restart` starts it again from this."""
    all_started: bool = False
    """Every process has been started once: from then on a dead one is restarted, not the
    whole cluster."""

    @property
    def path(self) -> Path:
        return self.directory / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def save(self) -> None:
        data = {
            "pids": self.pids,
            "binaries": self.binaries,
            "ports": self.ports,
            "stack_file": self.stack_file,
            "made_cert_dir": self.made_cert_dir,
            "made_dirs": self.made_dirs,
            "started": self.started,
            "specs": self.specs,
            "all_started": self.all_started,
        }
        self.path.write_text(json.dumps(data, indent=1))

    def refresh(self) -> None:
        """Read the state file again: another `up` (another process) may have restarted
        processes since this was read, and the file is the record."""
        again = State.load(self.directory)
        if again is not None:
            self.__dict__.update(again.__dict__)

    @classmethod
    def load(cls, directory: Path) -> State | None:
        path = directory / "state.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(directory, **data)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _runs(pid: int, binary: str) -> bool:
    """The process `pid` is alive and runs `binary` (a reused id is someone else's)."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == binary
    except OSError:
        return False


def _alive(state: State, name: str) -> bool:
    """The process `up` recorded as `name` still runs: its id runs its binary and, where its
    start time is recorded, started then (not a reused id running the same binary)."""
    pid, recorded = state.pids[name], state.started.get(name)
    return _runs(pid, state.binaries[name]) and (recorded is None or _started_at(pid) == recorded)


def _wait(check: Callable[[], bool], what: str, state: State, log: str | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if log and not _alive(state, log):
            break
        try:
            if check():
                return
        except (OSError, ssl.SSLError, subprocess.SubprocessError):
            pass
        time.sleep(0.5)
    tail = ""
    if log:
        lines = (state.logs / f"{log}.log").read_text(errors="replace").splitlines()
        tail = "\n".join(lines[-25:])
    raise SystemExit(f"localcluster: {what} did not come up; {log or ''} log ends:\n{tail}")


def _start(
    state: State,
    name: str,
    component: Component,
    argv: list[str],
    env: dict | None = None,
    ready: str | None = None,
) -> int:
    binary = str(build.binary(component, argv[0]).resolve())
    return _spawn(state, name, binary, [binary, *argv[1:]], env, ready)


def _spawn(
    state: State,
    name: str,
    binary: str,
    argv: list[str],
    env: dict | None,
    ready: str | None = None,
) -> int:
    """Start `argv` (whose process runs `binary`, as /proc/<pid>/exe names it), its output
    appended to the logs folder's, its id, start time and how it was started recorded (for
    `down` and `restart`); returns where in its log its output begins. `ready`: the READY
    check that says it has come up."""
    log = (state.logs / f"{name}.log").open("ab")
    since = log.tell()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=state.directory,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # outlives `make`; stopped by `down`, by its id
    )
    log.close()
    state.pids[name] = process.pid
    state.binaries[name] = binary
    state.started[name] = _started_at(process.pid)
    state.specs[name] = {"argv": argv, "env": env or {}, "ready": ready}
    state.save()
    return since


def _tls_accepts(port: int, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def _kubeconfig(state: State, ca: Path, cert: Path, key: Path) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{state.ports['apiserver']}",
                        "certificate-authority": str(ca),
                    },
                }
            ],
            "users": [
                {"name": "admin", "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        },
        sort_keys=False,
    )


def _stages(state: State) -> Path:
    """kwok's Stages: its own node and pod ones, read from its module (nodes become Ready and
    keep a lease; scheduled pods run; deleted pods go), and one written here that ends a
    running pod with the exit code its annotation names. Pods otherwise run until stopped:
    the tests decide when and how each ends."""
    module = build.module_dir(KWOK) / "kustomize" / "stage"
    files = (
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/fast/pod-delete.yaml",
    )
    texts = [(module / path).read_text().strip() for path in files]
    texts.append(POD_EXIT_STAGE.strip())
    # What `kubectl logs` / `trainstack logs` read from a training pod: kwok serves this file
    # (CRI log format) as every container's log, through its kubelet port.
    logs = state.directory / "pod.log"
    logs.write_text(
        "2026-01-01T00:00:00.000000000Z stdout F localcluster: a pod simulated by kwok; "
        "no container runs here, so nothing trains\n"
    )
    texts.append(
        yaml.safe_dump(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": "localcluster"},
                "spec": {"selector": {}, "logs": [{"logsFile": str(logs), "follow": False}]},
            },
            sort_keys=False,
        ).strip()
    )
    path = state.directory / "kwok-stages.yaml"
    path.write_text("\n---\n".join(texts) + "\n")
    return path


POD_EXIT_STAGE = f"""
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: localcluster-pod-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["{EXIT_CODE_ANNOTATION}"]'
      operator: 'Exists'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $code := index .metadata.annotations "{EXIT_CODE_ANNOTATION}" }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {{{{ if eq $code "0" }}}}Completed{{{{ else }}}}Error{{{{ end }}}}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {{{{ if eq $code "0" }}}}Succeeded{{{{ else }}}}Failed{{{{ end }}}}
"""


def _controller_config(component: Component, state: State, cert_dir: Path) -> Path:
    """The controller's Configuration: webhooks on its own port of 127.0.0.1 with our
    certificate, no metrics or probe ports, no leader election, no certificate rotation."""
    port = state.ports[component.name]
    common = {
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
        "leaderElection": {"leaderElect": False},
    }
    if component is JOBSET:
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            **common,
            "internalCertManagement": {"enable": False},
        }
    elif component is TRAINER:
        # The Trainer's Configuration has no certDir: its webhook server reads controller-
        # runtime's default folder under $TMPDIR, which _start_controllers sets per process.
        config = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            **common,
            "webhook": {"port": port, "host": "127.0.0.1"},
            "certManagement": {"enable": False},
            "statusServer": {"port": state.ports["trainer-status"]},
        }
    else:  # Kueue: the Configuration infra installs, with the integrations of both operators
        config = manager_config("trainjob")
        # And KubeRay's RayJob (the operator runs here too): a union, so it stays one entry
        # once infra's manager_config lists it itself.
        frameworks = {
            *config["integrations"]["frameworks"],
            *manager_config("pytorchjob")["integrations"]["frameworks"],
            RAY_FRAMEWORK,
        }
        config.update(common)
        config["integrations"] = {"frameworks": sorted(frameworks)}
        config["internalCertManagement"] = {"enable": False}
    path = state.directory / f"{component.name}-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _start_controllers(state: State, authority: Authority, webhook) -> None:
    env = {"KUBECONFIG": str(state.kubeconfig)}
    for component in (JOBSET, TRAINER, KUEUE):
        home = state.directory / component.name
        cert_dir = home / "k8s-webhook-server" / "serving-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(webhook.cert, cert_dir / "tls.crt")
        shutil.copy(webhook.key, cert_dir / "tls.key")
        config = _controller_config(component, state, cert_dir)
        argv = [next(iter(component.commands)), f"--config={config}"]
        if component is KUEUE:
            # Kueue's on-demand visibility API is an aggregated API server on a fixed port.
            argv.append("--feature-gates=VisibilityOnDemand=false")
        _start(state, component.name, component, argv, {**env, "TMPDIR": str(home)}, "tls")
    # The stack's PyTorch init-container template (infra/training_operator.py), as a file.
    operator_home = state.directory / TRAINING_OPERATOR.name
    operator_home.mkdir(parents=True, exist_ok=True)
    (operator_home / INIT_CONTAINER_KEY).write_text(init_container_template())
    _start(
        state,
        TRAINING_OPERATOR.name,
        TRAINING_OPERATOR,
        [
            "training-operator",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            f"--webhook-server-port={state.ports[TRAINING_OPERATOR.name]}",
            "--leader-elect=false",
            template_flag(str(operator_home)),
        ],
        # Its rotation's folder is fixed under /tmp; its webhook server reads $TMPDIR's.
        {
            **env,
            "MY_POD_NAMESPACE": TRAINING_OPERATOR_NAMESPACE,
            "TMPDIR": str(TRAINING_OPERATOR_CERT_DIR.parents[1]),
        },
        "tls",
    )


def _start_kuberay(state: State) -> None:
    """The Ray dashboard stand-in, then KubeRay's operator with it as its HTTP proxy.

    The operator's flags (ray-operator v1.6.2 main.go; its defaults are
    apis/config/v1alpha1/defaults.go's): no metrics or probe listener (`0`: controller-runtime
    opens none), no leader election (its default is on), every namespace watched (no
    --watch-namespace); no webhook (main.go sets one up only with ENABLE_WEBHOOKS=true), no
    --use-kubernetes-proxy (the dashboard is then reached at the head service's DNS name,
    utils.GetRayDashboardClientFunc). Go's default transport proxies that name through
    HTTP_PROXY and never a loopback address or `localhost` (golang.org/x/net/http/httpproxy
    useProxy), so the API server at 127.0.0.1 is reached directly; NO_PROXY says so too."""
    port = state.ports[RAY_DASHBOARD]
    python = str(Path(sys.executable).resolve())
    _spawn(
        state,
        RAY_DASHBOARD,
        python,
        [
            sys.executable,
            "-m",
            "localcluster.ray_dashboard",
            f"--kubeconfig={state.kubeconfig}",
            f"--port={port}",
        ],
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        },
        "tcp",
    )
    _wait_ready(state, RAY_DASHBOARD, 0, "the Ray dashboard stand-in")
    since = _start(
        state,
        KUBERAY.name,
        KUBERAY,
        [
            "kuberay-operator",
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--enable-leader-election=false",
        ],
        {
            "KUBECONFIG": str(state.kubeconfig),
            "HTTP_PROXY": f"http://127.0.0.1:{port}",
            "http_proxy": f"http://127.0.0.1:{port}",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        },
        "kuberay",
    )
    _wait_ready(state, KUBERAY.name, since, "the KubeRay operator")


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def _pki(state: State) -> Path:
    return state.directory / "pki"


def _etcd_ready(state: State, name: str, since: int) -> bool:
    url = f"http://127.0.0.1:{state.ports['etcd']}/health"
    return b"true" in urllib.request.urlopen(url, timeout=2).read()


def _apiserver_ready(state: State, name: str, since: int) -> bool:
    pki = _pki(state)
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    url = f"https://127.0.0.1:{state.ports['apiserver']}/readyz"
    return urllib.request.urlopen(url, context=context, timeout=3).status == 200


def _tls_ready(state: State, name: str, since: int) -> bool:
    """Its TLS server on its own port (a controller's webhooks, kwok's kubelet API)."""
    return _tls_accepts(state.ports[name], _pki(state) / "ca.crt")


def _tcp_ready(state: State, name: str, since: int) -> bool:
    return _accepts(state.ports[name])


def _kuberay_ready(state: State, name: str, since: int) -> bool:
    """controller-runtime's line once RayJob's workers run, in what it logged since `since`."""
    with (state.logs / f"{name}.log").open("rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace").splitlines()
    return any('"Starting workers"' in line and "RayJob" in line for line in lines)


READY: dict[str, Callable[[State, str, int], bool]] = {
    "etcd": _etcd_ready,
    "kube-apiserver": _apiserver_ready,
    "tls": _tls_ready,
    "tcp": _tcp_ready,
    "kuberay": _kuberay_ready,
}
"""How a process says it has come up: check(state, name, where its log begins). A process
with none (the controller manager, the scheduler) has come up once it runs."""


def _wait_ready(state: State, name: str, since: int, what: str | None = None) -> None:
    """Wait until process `name` passes its READY check (failing, with its log's end, if it
    dies first or takes longer than START_TIMEOUT_S)."""
    check = READY.get(state.specs[name]["ready"] or "")
    if check is None:
        _wait(lambda: True, what or name, state, name)
    else:
        _wait(lambda: check(state, name, since), what or name, state, name)


def restart(state: State, name: str) -> None:
    """Start process `name` of the cluster again: stop it if it still runs (by its recorded
    id, checked against its start time; SIGTERM, then SIGKILL after STOP_GRACE_S), start it
    with the arguments and environment it was first started with (same ports, same data and
    log files), wait until it has come up, and record its new id in the state file (which it
    reads first: the file is the record)."""
    state.refresh()
    spec = state.specs.get(name)
    if spec is None:
        known = ", ".join(state.specs) or "none"
        raise SystemExit(f"localcluster: restart {name}: no such process (known: {known})")
    if _alive(state, name):
        _stop(state, name)
    since = _spawn(state, name, state.binaries[name], spec["argv"], spec["env"], spec["ready"])
    _wait_ready(state, name, since)
    state.save()


def kill(state: State, name: str) -> int:
    """SIGKILL process `name` (a crash: no shutdown) if it is still the one `up` recorded,
    and wait until it is gone; returns its id. For the fault tests."""
    state.refresh()
    pid = state.pids[name]
    started = state.started.get(name) if _alive(state, name) else None
    _signal(pid, started, signal.SIGKILL)
    if _wait_gone({pid: started}, KILL_WAIT_S):
        raise SystemExit(f"localcluster: {name} (pid {pid}) still running after SIGKILL")
    _reap(pid)
    return pid


def _stop(state: State, name: str) -> None:
    """`down`'s stop, for one process: SIGTERM, a grace, SIGKILL; returns once it is gone."""
    pid = state.pids[name]
    started = {pid: state.started.get(name) or _started_at(pid)}
    _signal(pid, started[pid], signal.SIGTERM)
    left = _wait_gone(started, STOP_GRACE_S)
    for at in left.values():
        _signal(pid, at, signal.SIGKILL)
    if _wait_gone(left, KILL_WAIT_S):
        raise SystemExit(f"localcluster: {name} (pid {pid}) still running after SIGKILL")
    _reap(pid)


def up(state_dir: Path | None = None, config_dir: Path | None = None) -> State:
    """Build what is missing, start what is not running, apply every object; returns the
    state. A cluster some of whose processes died: those restarted (`restart`, in the order
    they were first started), the others left running. `config_dir`: where the stack file
    goes (default: the user's config dir)."""
    directory = (state_dir or default_state_dir()).resolve()
    existing = State.load(directory)
    if existing and existing.all_started:
        dead = [name for name in existing.pids if not _alive(existing, name)]
        if not dead:
            print(f"localcluster: already running ({directory}); applying its objects again")
        for name in dead:  # in the order `up` first started them
            old = existing.pids[name]
            restart(existing, name)
            new = existing.pids[name]
            print(f"localcluster: {name} (pid {old}) had stopped: restarted it, pid {new}")
        _install(existing, config_dir or user_config_dir() / "stack")
        return existing
    if existing:
        print(
            "localcluster: a previous cluster is partly started or stopped; stopping the rest first"
        )
        down(directory)
    for component in (KUBERNETES, ETCD, KWOK, *CONTROLLERS, KUBERAY, *ENGINE):
        build.build(component)
    directory.mkdir(parents=True, exist_ok=True)
    state = State(directory)
    state.logs.mkdir(exist_ok=True)
    names = ("etcd", "etcd-peer", "apiserver", "trainer-status", "kwok")
    state.ports = {name: _free_port() for name in names}
    state.ports.update({c.name: _free_port() for c in CONTROLLERS})
    state.ports[RAY_DASHBOARD] = _free_port()
    state.save()
    pki = directory / "pki"
    authority = Authority(pki)
    serving = authority.issue(
        "apiserver",
        common_name="kube-apiserver",
        hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc"),
    )
    admin = authority.issue(
        "admin", common_name="localcluster-admin", organization="system:masters", client=True
    )
    webhook = authority.issue(
        "webhook",
        common_name="localcluster-webhooks",
        hosts=("127.0.0.1", TRAINING_OPERATOR_WEBHOOK_HOST),
    )
    sa = signing_key(pki)
    state.kubeconfig.write_text(_kubeconfig(state, authority.pair.cert, admin.cert, admin.key))
    state.kubeconfig.chmod(0o600)

    etcd_url = f"http://127.0.0.1:{state.ports['etcd']}"
    peer_url = f"http://127.0.0.1:{state.ports['etcd-peer']}"
    _start(
        state,
        "etcd",
        ETCD,
        [
            "etcd",
            "--name=local",
            f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=local={peer_url}",
            "--unsafe-no-fsync",  # a throwaway cluster: speed over durability
            "--log-level=warn",
        ],
        ready="etcd",
    )
    _wait_ready(state, "etcd", 0)
    _start(
        state,
        "kube-apiserver",
        KUBERNETES,
        [
            "kube-apiserver",
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={state.ports['apiserver']}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={authority.pair.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            # The `kubernetes` Service's Endpoints cannot hold 127.0.0.1.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={directory / 'apiserver'}",
            f"--kubelet-client-certificate={admin.cert}",
            f"--kubelet-client-key={admin.key}",
            f"--kubelet-certificate-authority={authority.pair.cert}",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
        ],
        ready="kube-apiserver",
    )
    _wait_ready(state, "kube-apiserver", 0)
    kube = ["--kubeconfig=" + str(state.kubeconfig), "--leader-elect=false"]
    _start(
        state,
        "kube-controller-manager",
        KUBERNETES,
        [
            "kube-controller-manager",
            *kube,
            "--secure-port=0",
            f"--service-account-private-key-file={sa.key}",
            f"--root-ca-file={authority.pair.cert}",
            "--use-service-account-credentials=false",
        ],
    )
    _start(state, "kube-scheduler", KUBERNETES, ["kube-scheduler", *kube, "--secure-port=0"])
    _start(
        state,
        "kwok",
        KWOK,
        [
            "kwok",
            f"--kubeconfig={state.kubeconfig}",
            f"--config={_stages(state)}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            "--cidr=10.244.0.0/16",
            "--node-lease-duration-seconds=40",
            # Its kubelet API (pod logs) on the port the nodes advertise, over TLS.
            f"--node-port={state.ports['kwok']}",
            f"--server-address=127.0.0.1:{state.ports['kwok']}",
            f"--tls-cert-file={webhook.cert}",
            f"--tls-private-key-file={webhook.key}",
        ],
        ready="tls",  # on a restart; the first start waits for its nodes (`_install`)
    )
    client = _client(state)
    # KubeRay's CRDs too: Kueue's RayJob integration and the operator need them served.
    _apply_all(client, _from_controllers(manifests.crds, state, authority))
    _apply_all(client, manifests.crds(KUBERAY, build.module_dir(KUBERAY), 0, b""))
    _wait_established(client, state)
    _apply_all(
        client,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in (TRAINING_OPERATOR_NAMESPACE, "kueue-system", "kubeflow-system")
        ],
    )
    _training_operator_secret(client, authority, webhook)
    state.made_cert_dir = not TRAINING_OPERATOR_CERT_DIR.exists()
    # In a pod the kubelet mounts that Secret here; cert-controller waits for the files.
    TRAINING_OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(authority.pair.cert, TRAINING_OPERATOR_CERT_DIR / "ca.crt")
    shutil.copy(webhook.cert, TRAINING_OPERATOR_CERT_DIR / "tls.crt")
    shutil.copy(webhook.key, TRAINING_OPERATOR_CERT_DIR / "tls.key")
    if not KUEUE_METRICS_CERT_DIR.exists():
        top = KUEUE_METRICS_CERT_DIR.parents[1]
        if not top.exists():
            state.made_dirs.append(str(top))
        KUEUE_METRICS_CERT_DIR.mkdir(parents=True)
        shutil.copy(webhook.cert, KUEUE_METRICS_CERT_DIR / "tls.crt")
        shutil.copy(webhook.key, KUEUE_METRICS_CERT_DIR / "tls.key")
    state.save()
    _start_controllers(state, authority, webhook)
    # Before their servers answer: the Training Operator's certificate rotation opens its
    # webhook server only once it has found (and patched) its webhook configuration.
    _apply_all(client, _from_controllers(manifests.webhook_configurations, state, authority))
    for component in CONTROLLERS:
        _wait_ready(state, component.name, 0, f"the {component.name} webhook server")
    # After the webhook servers answer: the RayClusters it creates pass Kueue's webhooks.
    _start_kuberay(state)
    state.all_started = True
    state.save()
    _install(state, config_dir or user_config_dir() / "stack")
    _print_summary(state)
    return state


def _from_controllers(render: Callable, state: State, authority: Authority) -> list[dict]:
    """`render` (manifests.crds or manifests.webhook_configurations) over every controller,
    each pointed at its own webhook port with the cluster's CA."""
    ca = authority.pair.cert.read_bytes()
    return [
        obj
        for component in CONTROLLERS
        for obj in render(component, build.module_dir(component), state.ports[component.name], ca)
    ]


def _client(state: State):
    from kubernetes import config as kube_config
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(kube_config.new_client_from_config(str(state.kubeconfig)))


def apply(client, obj: dict) -> dict:
    """Server-side apply, as `pulumi up`'s provider does; the field manager is ours."""
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    meta = obj["metadata"]
    return resource.server_side_apply(
        body=obj,
        name=meta["name"],
        namespace=meta.get("namespace"),
        field_manager="localcluster",
        force_conflicts=True,
    ).to_dict()


def _apply_all(client, objs: list[dict]) -> None:
    for obj in objs:
        apply(client, obj)


def _wait_established(client, state: State) -> None:
    crds = client.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )

    def established() -> bool:
        for crd in crds.get().items:
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            if conditions.get("Established") != "True":
                return False
        return True

    _wait(established, "the CRDs", state)
    client.resources.invalidate_cache()


def _training_operator_secret(client, authority: Authority, webhook) -> None:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    apply(
        client,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": TRAINING_OPERATOR_SECRET,
                "namespace": TRAINING_OPERATOR_NAMESPACE,
            },
            "data": {
                "ca.crt": b64(authority.pair.cert),
                "ca.key": b64(authority.pair.key),
                "tls.crt": b64(webhook.cert),
                "tls.key": b64(webhook.key),
            },
        },
    )


def _install(state: State, stack_dir: Path) -> None:
    """Nodes, what `pulumi up` installs, and the stack file."""
    client = _client(state)
    config = objects.local_stack()
    nodes = objects.nodes(config)
    _apply_all(client, nodes)
    node_api = client.resources.get(api_version="v1", kind="Node")

    def ready() -> bool:
        for node in nodes:
            got = node_api.get(name=node["metadata"]["name"])
            conditions = {c.type: c.status for c in (got.status.conditions or [])}
            if conditions.get("Ready") != "True":
                return False
        return True

    _wait(ready, "the kwok nodes", state, "kwok")
    try:
        changed = program.install(state.directory, config, state.kubeconfig)
    except EngineError as exc:
        raise SystemExit(f"localcluster: {exc}") from None
    log = program.engine(state.directory).log
    print(f"localcluster: pulumi up: {changed or 'no changes'} (log {log})")
    runs = state.directory / "runs"
    runs.mkdir(exist_ok=True)
    stack_dir.mkdir(parents=True, exist_ok=True)
    stack_file = stack_dir / f"{objects.STACK}.yaml"
    stack_file.write_text(objects.stack_file(config, state.kubeconfig, runs))
    state.stack_file = str(stack_file)
    state.save()


def _print_summary(state: State) -> None:
    print(f"localcluster: up, state in {state.directory}")
    for name, pid in state.pids.items():
        print(f"  {name:<24} pid {pid:<8} log {state.logs / (name + '.log')}")
    print(f"  kubeconfig: {state.kubeconfig}")
    print(f"  stack file: {state.stack_file}  (trainstack launch stack={objects.STACK} ...)")


def down(state_dir: Path | None = None) -> None:
    """`pulumi destroy` (while the whole cluster runs), then stop the processes `up` started
    (by id, checked), wait until every one is gone (its last thread: a bounded grace after
    SIGTERM, then SIGKILL), remove the state and stack file; a `down` that returned leaves
    nothing an `up` straight after could meet."""
    directory = (state_dir or default_state_dir()).resolve()
    state = State.load(directory)
    if state is None:
        print(f"localcluster: nothing running ({directory} has no state)")
        shutil.rmtree(directory, ignore_errors=True)
        return
    mine = {n: pid for n, pid in state.pids.items() if _alive(state, n)}
    if len(mine) == len(state.pids):
        _destroy(state)
    started = {pid: _started_at(pid) for pid in mine.values()}
    for pid in reversed(list(mine.values())):
        _signal(pid, started[pid], signal.SIGTERM)
    left = _wait_gone(started, STOP_GRACE_S)
    for pid in left:
        _signal(pid, left[pid], signal.SIGKILL)
    left = _wait_gone(left, KILL_WAIT_S)
    for name, pid in mine.items():
        if pid not in left:
            _reap(pid)
            print(f"localcluster: stopped {name} (pid {pid})")
    if left:
        names = ", ".join(f"{n} (pid {pid})" for n, pid in mine.items() if pid in left)
        raise SystemExit(
            f"localcluster: {names} still running {KILL_WAIT_S:.0f}s after SIGKILL; "
            f"{directory} is kept: run `python -m localcluster down` again"
        )
    if state.stack_file:
        Path(state.stack_file).unlink(missing_ok=True)
    if state.made_cert_dir:
        shutil.rmtree(TRAINING_OPERATOR_CERT_DIR.parent, ignore_errors=True)
    for made in state.made_dirs:
        shutil.rmtree(made, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)


STOP_GRACE_S = 15.0
"""How long `down` gives the processes to shut down after SIGTERM before it SIGKILLs them."""
KILL_WAIT_S = 10.0
"""How long `down` then waits for a SIGKILLed process to be gone before it fails naming it."""


def _started_at(pid: int) -> str | None:
    """When process `pid` started (field 22 of /proc/<pid>/stat, in clock ticks since boot;
    proc(5)); None: there is none. With its id it names one process: an id is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _holds_on(pid: int, started: str | None) -> bool:
    """The process `pid` that started at `started` has a thread that has not exited. Until
    its last thread is gone it keeps its ports, files and locks, though its leader thread
    (whose memory /proc/<pid>/exe reads, so `_runs`) may have exited before the others; a
    zombie has let go of everything."""
    if started is None or _started_at(pid) != started:
        return False
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for thread in threads:
        try:
            stat = Path(f"/proc/{pid}/task/{thread}/stat").read_text()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] not in ("Z", "X", "x"):
            return True
    return False


def _signal(pid: int, started: str | None, signum: int) -> None:
    """Send `signum` to `pid` while it is still the process that started at `started`."""
    if _holds_on(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _wait_gone(started: dict[int, str | None], timeout_s: float) -> dict[int, str | None]:
    """Wait up to `timeout_s` for every process of `started` (id -> start time) to be gone;
    returns those still there."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {pid: at for pid, at in started.items() if _holds_on(pid, at)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _destroy(state: State) -> None:
    """`pulumi destroy` while the cluster still runs; a failure is said, and the cluster
    (with the state recording what it held) goes anyway."""
    try:
        program.uninstall(state.directory)
    except EngineError as exc:
        print(f"localcluster: WARNING {exc}", file=sys.stderr)


def _reap(pid: int) -> None:
    """Collect a stopped process's exit status when `up` ran in this very process (the tests'
    session): otherwise it stays a zombie until this process ends. Another process's child is
    its parent's (or init's) to collect."""
    deadline = time.monotonic() + 5
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def finish(state_dir: Path | None, run_id: str, exit_code: int) -> list[str]:
    """End the running pods of a run (label `trainstack.io/run-id`) with `exit_code`; of a
    RayJob's run only its submitter pod, whose exit stands for the driver's (the head and
    workers are the Ray cluster, which KubeRay deletes once the job has ended)."""
    state = State.load((state_dir or default_state_dir()).resolve())
    if state is None:
        raise SystemExit("localcluster: no cluster is running (make cluster-up)")
    return end_run(ApiKube.from_kubeconfig(state.kubeconfig), run_id, exit_code)


def end_run(kube: Kube, run_id: str, exit_code: int) -> list[str]:
    """`finish` on the cluster `kube` reads: the names of the pods it ended."""
    from jobs.spec import LABEL_PREFIX

    selector = f"{LABEL_PREFIX}/run-id={run_id}"
    rayjobs = kube.rayjobs(selector)
    if rayjobs:
        pods = [pod for rayjob in rayjobs for pod in submitter_pods(kube, rayjob)]
    else:
        pods = kube.pods(None, selector)
    ended = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        meta = pod["metadata"]
        kube.annotate_pod(meta["namespace"], meta["name"], {EXIT_CODE_ANNOTATION: str(exit_code)})
        ended.append(meta["name"])
    return ended
