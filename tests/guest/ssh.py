"""SSH to a test guest: keys generated per test run, never stored in the repository."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

# A test guest is new on every run: its host key cannot be known beforehand.
SSH_OPTIONS = (
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=5",
)


def generate_key(directory: Path) -> Path:
    """A fresh ed25519 key pair in directory; returns the private key's path (the public one is `.pub` beside it)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpulab-test", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    return key


@dataclass(frozen=True)
class Guest:
    """A running guest reachable over SSH."""

    name: str
    host: str  # the guest's address
    user: str  # key-only SSH, passwordless sudo
    key: Path  # private key; `<key>.pub` beside it
    kernel_release: str = ""  # of the image it booted
    host_address: str = ""  # this machine's address on the guest's network (serve apt repos, pip indexes here)
    console_log: Path | None = None  # the serial console, for debugging a failed boot
    boot_seconds: float = 0.0  # from domain start to the first SSH login

    def ssh_argv(self, *command: str) -> list[str]:
        return ["ssh", *SSH_OPTIONS, "-i", str(self.key), f"{self.user}@{self.host}", *command]

    def ssh(self, *command: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command in the guest (one shell string or argv joined by ssh)."""
        proc = subprocess.run(self.ssh_argv(*command), capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"ssh {self.user}@{self.host} {' '.join(command)} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def wait_for_ssh(self, timeout: float) -> float:
        """Poll until a command runs over SSH; returns the seconds waited."""
        start = time.monotonic()
        last = ""
        while time.monotonic() - start < timeout:
            proc = self.ssh("true", timeout=30, check=False)
            if proc.returncode == 0:
                return time.monotonic() - start
            last = proc.stderr.strip()
            time.sleep(2)
        raise TimeoutError(f"{self.name}: no SSH at {self.user}@{self.host} after {timeout:.0f} s (last: {last})")

    def ansible_vars(self) -> dict[str, str]:
        """Host variables that let Ansible reach the guest over SSH."""
        return {
            "ansible_host": self.host,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_become": "true",
            # A TCG guest on a loaded machine can be slow to accept a connection.
            "ansible_ssh_retries": "3",
            "ansible_ssh_timeout": "60",
        }

    def inventory(self, path: Path, group: str = "gpu_nodes", **extra_vars: object) -> Path:
        """Write a YAML inventory holding this guest in `group` (plus extra host variables); returns its path."""
        host_vars: dict[str, object] = {**self.ansible_vars(), **extra_vars}
        path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": {self.name: host_vars}}}}}))
        return path
