"""The real Pulumi engine for the local cluster: the CLI and the Kubernetes provider built from
their Go modules (localcluster/versions.py), driven through the Automation API with an inline
program, state in a file backend in the folder it is given, secrets encrypted with a passphrase.
`localcluster up` runs it on localcluster/program.py; `down` runs its destroy first.

Everything the CLI writes stays in `<state>/pulumi/` (`PULUMI_HOME` too: nothing in the user's
home). Nothing is downloaded: plugin acquisition is off, and the provider is found on PATH,
where the engine takes an ambient plugin before any installed one (the SDK pinned in
constraints.txt asks for plugin 4.34.2; the proxy serves only an earlier commit, see
versions.PULUMI_KUBERNETES_VERSION). Inline programs need no language plugin.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pulumi import automation as auto

from localcluster import build
from localcluster.versions import PULUMI, PULUMI_KUBERNETES

PROJECT = "trainstack-local"
STACK = "local"
PASSPHRASE = "localcluster"
"""The state's secrets (the provider's kubeconfig, whose client key is the cluster's admin) are
encrypted with it. The state never leaves the machine and the cluster lives as long as it, so a
fixed phrase protects it as much as the kubeconfig file beside it."""


class EngineError(RuntimeError):
    """The engine refused or failed an operation; the message is its own."""


@dataclass(frozen=True)
class Engine:
    """One local stack's engine: its folder under the cluster's state."""

    directory: Path

    @property
    def backend(self) -> Path:
        return self.directory / "state"

    @property
    def log(self) -> Path:
        return self.directory / "engine.log"

    def has_state(self) -> bool:
        """Whether the file backend holds the stack (`destroy` removes it)."""
        return (self.backend / ".pulumi" / "stacks" / PROJECT / f"{STACK}.json").is_file()

    def env(self) -> dict[str, str]:
        provider = build.bin_dir(PULUMI_KUBERNETES)
        return {
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PATH": f"{provider}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _command(self) -> auto.PulumiCommand:
        """The built CLI. Its constructor runs `pulumi version` with this process's environment
        (which writes a log to $PULUMI_HOME/logs): PULUMI_HOME is ours for that call, so
        nothing lands in the user's ~/.pulumi."""
        home = str(self.directory / "home")
        before = os.environ.get("PULUMI_HOME")
        os.environ["PULUMI_HOME"] = home
        try:
            return auto.PulumiCommand(root=str(build.bin_dir(PULUMI).parent))
        finally:
            if before is None:
                os.environ.pop("PULUMI_HOME", None)
            else:
                os.environ["PULUMI_HOME"] = before

    def stack(self, program: Callable[[], None]) -> auto.Stack:
        for component in (PULUMI, PULUMI_KUBERNETES):
            if not build.is_built(component):
                raise EngineError(
                    f"{component.key} is not built: run `python -m localcluster build`"
                )
        self.backend.mkdir(parents=True, exist_ok=True)
        settings = auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=self.backend.as_uri())
        )
        options = auto.LocalWorkspaceOptions(
            work_dir=str(self.directory),
            pulumi_home=str(self.directory / "home"),
            env_vars=self.env(),
            secrets_provider="passphrase",
            project_settings=settings,
            pulumi_command=self._command(),
        )
        return auto.create_or_select_stack(
            stack_name=STACK, project_name=PROJECT, program=program, opts=options
        )

    def _run(self, what: str, call: Callable[[Callable[[str], None]], object]) -> object:
        """One operation, its output appended to the engine log; a failure says the last
        lines the engine printed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as log:
            log.write(f"--- pulumi {what}\n")

            def out(line: str) -> None:
                log.write(line if line.endswith("\n") else line + "\n")
                log.flush()

            try:
                return call(out)
            except auto.CommandError as exc:
                raise EngineError(f"pulumi {what} failed (log: {self.log}):\n{exc}") from None

    def up(self, program: Callable[[], None]) -> auto.UpResult:
        stack = self.stack(program)
        return self._run("up", lambda out: stack.up(on_output=out, color="never"))

    def preview(self, program: Callable[[], None]) -> auto.PreviewResult:
        stack = self.stack(program)
        return self._run("preview", lambda out: stack.preview(on_output=out, color="never"))

    def destroy(self) -> None:
        """Delete what the stack holds, then the stack; nothing to do without state."""
        if not self.has_state():
            return
        stack = self.stack(lambda: None)
        self._run("destroy", lambda out: stack.destroy(on_output=out, color="never"))
        stack.workspace.remove_stack(STACK)


def changes(summary: dict[str, int]) -> dict[str, int]:
    """A preview's or update's change summary without the unchanged ("same") resources."""
    return {op: count for op, count in summary.items() if op != "same" and count}
