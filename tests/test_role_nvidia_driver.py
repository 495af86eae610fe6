"""nvidia_driver's kernel and Secure Boot decisions.

Which headers meta packages and prebuilt module packages a host gets, decided from dpkg's and apt's answers
(Ubuntu's archive cannot be reached here, so its cases are decided from captured-format answers). Then Secure Boot
in a Debian 12 root: the module signing key is created before its enrollment is checked, a chroot (no EFI
variables) stops the run saying the enrollment cannot be checked, and a stand-in mokutil drives the not-enrolled,
queued and enrolled answers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from guest.image import in_chroot
from playbook import REPO, ansible_playbook
from provision.apt_mirror import candidate_version
from provision.inventory import chroot_inventory, require_ansible

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpulab.provision.plugins.filter.kernel_packages import (
    apt_offered,
    kernel_companions,
    kernel_flavours,
    kernel_packages,
)

GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")
P100 = "10de:15f8"

# dpkg-query -W -f='${Package} ${Version} ${Status}\n' 'linux-image-*' on the Debian 12 image.
DEBIAN_IMAGES = """\
linux-image-6.1.0-50-amd64 6.1.176-1 install ok installed
linux-image-6.1.0-50-amd64-unsigned  unknown ok not-installed
linux-image-amd64 6.1.176-1 install ok installed
linux-image-generic  unknown ok not-installed
"""
# apt-cache policy on it: the meta package installed once and removed, a newer kernel in the security archive.
DEBIAN_POLICY = """\
linux-headers-amd64:
  Installed: (none)
  Candidate: 6.1.192-2
  Version table:
     6.1.192-2 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
     6.1.176-1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
        100 /var/lib/dpkg/status
"""
# The image kernel's own headers, in the archive.
KERNEL_HEADERS = """\
linux-headers-6.1.0-50-amd64:
  Installed: (none)
  Candidate: 6.1.176-1
  Version table:
     6.1.176-1 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
"""
# An Ubuntu 22.04 server on the HWE kernel, two kernels installed, one old meta package removed.
UBUNTU_IMAGES = """\
linux-image-6.8.0-40-generic 6.8.0-40.40~22.04.3 install ok installed
linux-image-6.8.0-45-generic 6.8.0-45.45~22.04.1 install ok installed
linux-image-generic-hwe-22.04 6.8.0-45.45~22.04.1 install ok installed
linux-image-generic 5.15.0.119.119 deinstall ok config-files
linux-image-unsigned-6.8.0-45-generic  unknown ok not-installed
linux-image-generic-hwe-22.04-dbgsym  unknown ok not-installed
"""
UBUNTU_KERNELS = ["6.8.0-40-generic", "6.8.0-45-generic"]
PREFIX = "linux-modules-nvidia-535-server-"


def ubuntu_policy(*names: str, none: tuple[str, ...] = ()) -> str:
    """apt-cache policy output offering `names` (and knowing `none` without a candidate)."""
    out = []
    for name in names:
        out.append(f"{name}:\n  Installed: (none)\n  Candidate: 6.8.0-45.45~22.04.1\n  Version table:\n")
        out.append("     6.8.0-45.45~22.04.1 500\n        500 http://archive.ubuntu.com/ubuntu jammy-updates/main\n")
    for name in none:
        out.append(f"{name}:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n")
    return "".join(out)


def test_debian_gets_the_headers_meta_package_of_its_kernel_flavour_at_the_kernel_s_version():
    assert kernel_flavours(DEBIAN_IMAGES) == ["amd64"]
    assert kernel_companions(DEBIAN_IMAGES, ["6.1.0-50-amd64"]) == [
        "linux-headers-amd64",
        "linux-headers-6.1.0-50-amd64",
    ]
    plan = kernel_packages(DEBIAN_IMAGES, DEBIAN_POLICY + KERNEL_HEADERS, ["6.1.0-50-amd64"])
    # 6.1.176-1, not the candidate 6.1.192-2: that one would make apt upgrade linux-image-amd64 along with it.
    assert plan == {
        "flavours": ["amd64"],
        "images": ["linux-image-amd64"],
        "headers": ["linux-headers-amd64=6.1.176-1"],
        "modules": [],
        "modules_missing": [],
        "headers_missing": [],
        "metas": ["linux-image-amd64", "linux-headers-amd64"],
    }


def test_a_kernel_whose_headers_left_the_archive_is_named_before_the_driver_changes():
    # 6.1.0-40's headers: known from an older index, no candidate now (the archive moved on to 6.1.0-50).
    gone = "linux-headers-6.1.0-40-amd64:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n"
    plan = kernel_packages(DEBIAN_IMAGES, DEBIAN_POLICY + KERNEL_HEADERS + gone, ["6.1.0-40-amd64", "6.1.0-50-amd64"])
    assert plan["headers_missing"] == ["linux-headers-6.1.0-40-amd64"]
    # apt-cache policy prints nothing for a name no index knows: missing as well.
    assert kernel_packages(DEBIAN_IMAGES, DEBIAN_POLICY, ["6.1.0-50-amd64"])["headers_missing"] == [
        "linux-headers-6.1.0-50-amd64"
    ]
    task = (REPO / "roles/nvidia_driver/tasks/family/Debian/kernel.yml").read_text()
    assert "nvidia_driver_kernel_packages['headers_missing'] | length > 0" in task


def test_the_headers_meta_package_is_named_alone_once_installed_or_when_the_archive_lost_the_version():
    installed = DEBIAN_POLICY.replace("Installed: (none)", "Installed: 6.1.176-1")
    assert kernel_packages(DEBIAN_IMAGES, installed, ["6.1.0-50-amd64"])["headers"] == ["linux-headers-amd64"]
    # Only dpkg's status file still knows 6.1.176-1: apt could not download it.
    gone = DEBIAN_POLICY.replace("        500 http://deb.debian.org/debian bookworm/main amd64 Packages\n", "")
    assert kernel_packages(DEBIAN_IMAGES, gone, ["6.1.0-50-amd64"])["headers"] == ["linux-headers-amd64"]


def test_a_flavour_without_a_headers_meta_package_and_a_kernel_without_meta_package():
    images = (
        "linux-image-cloud-amd64 6.1.176-1 install ok installed\nlinux-image-amd64-dbg 6.1.176-1 install ok installed\n"
    )
    assert kernel_flavours(images) == ["cloud-amd64"]
    assert kernel_packages(images, "", ["6.1.0-50-cloud-amd64"])["headers"] == []  # apt offers none: nothing asked
    assert kernel_flavours("linux-image-6.1.0-50-amd64 6.1.176-1 install ok installed\n") == []
    assert kernel_flavours("") == []


def test_ubuntu_hwe_gets_the_hwe_headers_and_dkms_unless_prebuilt_modules_are_asked_for():
    assert kernel_flavours(UBUNTU_IMAGES) == ["generic-hwe-22.04"]
    plan = kernel_packages(UBUNTU_IMAGES, ubuntu_policy("linux-headers-generic-hwe-22.04"), UBUNTU_KERNELS)
    assert plan["headers"] == ["linux-headers-generic-hwe-22.04=6.8.0-45.45~22.04.1"]
    assert plan["modules"] == [] and plan["modules_missing"] == []


def test_ubuntu_prefers_prebuilt_modules_when_every_kernel_and_flavour_has_them():
    names = kernel_companions(UBUNTU_IMAGES, UBUNTU_KERNELS, PREFIX)
    assert names == [
        "linux-headers-generic-hwe-22.04",
        "linux-headers-6.8.0-40-generic",
        "linux-headers-6.8.0-45-generic",
        "linux-modules-nvidia-535-server-generic-hwe-22.04",
        "linux-modules-nvidia-535-server-6.8.0-40-generic",
        "linux-modules-nvidia-535-server-6.8.0-45-generic",
    ]
    plan = kernel_packages(UBUNTU_IMAGES, ubuntu_policy(*names), UBUNTU_KERNELS, PREFIX)
    assert plan["modules"] == names[3:] and plan["modules_missing"] == [] and plan["headers_missing"] == []
    # A kernel hold covers the flavour's packages, never one kernel's.
    assert plan["metas"] == [
        "linux-image-generic-hwe-22.04",
        "linux-headers-generic-hwe-22.04",
        "linux-modules-nvidia-535-server-generic-hwe-22.04",
    ]


def test_ubuntu_falls_back_to_dkms_when_one_kernel_has_no_prebuilt_module():
    names = kernel_companions(UBUNTU_IMAGES, UBUNTU_KERNELS, PREFIX)
    policy = ubuntu_policy(*names[:4], names[5], none=(names[4],))  # 6.8.0-40's module: known, not installable
    assert apt_offered(policy) == [*names[:4], names[5]]
    plan = kernel_packages(UBUNTU_IMAGES, policy, UBUNTU_KERNELS, PREFIX)
    assert plan["modules"] == []
    assert plan["modules_missing"] == ["linux-modules-nvidia-535-server-6.8.0-40-generic"]
    assert plan["metas"] == ["linux-image-generic-hwe-22.04", "linux-headers-generic-hwe-22.04"]


# -- Secure Boot in a Debian 12 root ------------------------------------------------------------------------------
MOK_KEY = "/var/lib/dkms/mok.key"
MOK_PUB = "/var/lib/dkms/mok.pub"

# mokutil 0.6.0's words (Debian 12); a chroot has no EFI variables, so the answers come from a state file.
FAKE_MOKUTIL = """\
#!/bin/sh
state=$(cat /etc/gpulab-test-mok-state)
echo "$*" >> /var/log/gpulab-test-mokutil.log
case "$1" in
--test-key)
    case "$state" in
    enrolled) echo "$2 is already enrolled"; exit 1 ;;
    pending) echo "$2 is already in the enrollment request"; exit 1 ;;
    *) echo "$2 is not enrolled"; exit 0 ;;
    esac ;;
--import)
    printf 'input password: '; IFS= read -r first; printf '\\ninput password again: '; IFS= read -r second; echo
    [ "$first" = "$second" ] || { echo "password doesn't match" >&2; exit 1; }
    printf '%s\\n' "$first" > /var/log/gpulab-test-mok-password
    echo pending > /etc/gpulab-test-mok-state ;;
*) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""

SECURE_BOOT_PLAY = """\
- name: nvidia_driver's Secure Boot tasks alone
  hosts: image
  gather_facts: false
  tasks:
    - name: Check the key
      ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: secure_boot.yml
        vars_from: Debian.yml

    - name: Show the outcome
      ansible.builtin.debug:
        msg: "state={{ nvidia_driver_mok_state }} pending={{ nvidia_driver_mok_pending }}"
"""


def failure(output: str, host: str = "image") -> str:
    """The failed task's message, whitespace collapsed."""
    block = output.split(f"fatal: [{host}]: FAILED!", 1)[1].split("\nTASK [", 1)[0].split("\nPLAY RECAP", 1)[0]
    return " ".join(block.split())


@pytest.mark.slow
def test_secure_boot_creates_the_key_before_checking_it_and_stops_naming_the_enrollment(debian_root, tmp_path):
    require_ansible()
    root = debian_root
    driver = candidate_version(root, "nvidia-driver").split("-")[0]
    host = {
        "root": root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "gpulab_profile": "none",
        "gpulab_stack": {"driver": driver, "cuda": "11.8"},
        "gpulab_secure_boot_signing": True,
    }
    inventory = chroot_inventory(tmp_path / "inventory", {"image": host})
    # The chroot shows this machine's sysfs, which has no EFI: Secure Boot is assumed on over gpu_facts' answer.
    secure_boot_on = ("-e", json.dumps({"gpulab_secure_boot": "enabled"}))

    first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, *secure_boot_on)
    assert first.rc == 2, first.explain()
    assert first.recap()["image"]["failed"] == 1
    tasks = [line for line in first.output.splitlines() if line.startswith("TASK [nvidia_driver : ")]
    created = next(
        i for i, t in enumerate(tasks) if t.startswith(f"TASK [nvidia_driver : Create the signing key {MOK_KEY}")
    )
    checked = next(i for i, t in enumerate(tasks) if t.startswith("TASK [nvidia_driver : Check whether the key is"))
    assert created < checked, tasks
    assert "changed: [image]" in first.output.split(tasks[created], 1)[1].split("TASK [", 1)[0]

    # The key pair dkms signs with, made with dkms's parameters: the private key readable by root alone.
    assert (root / MOK_KEY.lstrip("/")).stat().st_mode & 0o777 == 0o600
    subject = in_chroot(root, "openssl", "x509", "-inform", "DER", "-in", MOK_PUB, "-noout", "-subject").stdout
    assert "CN = DKMS module signing key" in subject, subject

    message = failure(first.output)
    assert (
        f"Secure Boot is on, but mokutil cannot tell whether the module signing key {MOK_PUB} is enrolled "
        "(EFI variables are not supported on this system: the EFI variables cannot be read here - a chroot, a "
        "container or a boot without EFI), so the role stops rather than install modules that may not load."
    ) in message, message
    assert f"`mokutil --import {MOK_PUB}` (it asks for a one-time password), reboot, choose" in message
    assert '"Enroll MOK" in the MOK manager on the console and enter that password, then run again.' in message
    assert "is not enrolled" not in message  # unknown is not claimed to be missing
    # Stopped before the driver: nothing of it installed or pinned.
    driver_state = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Status}", "nvidia-driver"], capture_output=True, text=True
    )
    assert "ok installed" not in driver_state.stdout
    assert not (root / "etc/apt/preferences.d/gpulab-nvidia-driver").exists()

    # Again: the same stop, the same key (a new one would undo an enrollment), nothing changed.
    pub = (root / MOK_PUB.lstrip("/")).read_bytes()
    second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, *secure_boot_on)
    assert second.rc == 2 and second.recap()["image"]["changed"] == 0, second.explain()
    assert (root / MOK_PUB.lstrip("/")).read_bytes() == pub
    assert failure(second.output) == message

    # A stand-in mokutil with a booted host's answers.
    fake = root / "usr/bin/mokutil"
    fake.write_text(FAKE_MOKUTIL)
    fake.chmod(0o755)
    state = root / "etc/gpulab-test-mok-state"
    play = tmp_path / "secure_boot.yml"
    play.write_text(SECURE_BOOT_PLAY)

    state.write_text("missing\n")
    missing = ansible_playbook(play, inventory)
    assert missing.rc == 2, missing.explain()
    message = failure(missing.output)
    assert (
        f"Secure Boot is on and the module signing key {MOK_PUB} is not enrolled, so the kernel would refuse the "
        f"NVIDIA modules. Run `mokutil --import {MOK_PUB}` (it asks for a one-time password), reboot, choose "
        '"Enroll MOK" in the MOK manager on the console and enter that password, then run again. Or set '
        "nvidia_driver_mok_import: true and nvidia_driver_mok_password (from a vault) to queue the import from "
        "this run."
    ) in message, message

    password = "gpulab test pw"
    extra = json.dumps({"nvidia_driver_mok_import": True, "nvidia_driver_mok_password": password})
    queued = ansible_playbook(play, inventory, "-e", extra)
    assert queued.rc == 0, queued.explain()
    assert "state=missing pending=True" in queued.output
    assert (root / "var/log/gpulab-test-mok-password").read_text() == password + "\n"  # typed twice, matching
    assert password not in queued.output

    again = ansible_playbook(play, inventory)  # queued, not confirmed yet: the run goes on, no second import
    assert again.rc == 0 and "state=pending pending=True" in again.output, again.explain()
    assert (root / "var/log/gpulab-test-mokutil.log").read_text().count("--import") == 1

    state.write_text("enrolled\n")
    enrolled = ansible_playbook(play, inventory)
    assert enrolled.rc == 0 and "state=enrolled pending=False" in enrolled.output, enrolled.explain()
    assert enrolled.recap()["image"]["changed"] == 0

    # The organisation's own enrolled key from the controller, vault-encrypted: installed in place of the host's,
    # decrypted, readable by root alone, never shown; a second run changes nothing.
    org = tmp_path / "org"
    org.mkdir()
    # Made with the root's openssl (the role installed it), then taken to the controller's side.
    in_chroot(root, "openssl", "req", "-new", "-x509", "-nodes", "-newkey", "rsa:2048", "-days", "30", "-subj",
              "/CN=ACME module key", "-outform", "DER", "-keyout", "/tmp/org.key", "-out", "/tmp/org.der")  # fmt: skip
    for name in ("key", "der"):
        (root / f"tmp/org.{name}").rename(org / f"mok.{name}")
    plain = (org / "mok.key").read_text()
    (org / "vault-pass").write_text("gpulab test vault\n")
    subprocess.run(
        [sys.executable, "-m", "ansible.cli.vault", "encrypt", "--vault-password-file", str(org / "vault-pass"),
         str(org / "mok.key")],
        check=True, capture_output=True,
    )  # fmt: skip
    assert "ANSIBLE_VAULT" in (org / "mok.key").read_text()
    keys = json.dumps(
        {"nvidia_driver_mok_key_src": str(org / "mok.key"), "nvidia_driver_mok_certificate_src": str(org / "mok.der")}
    )
    vault = ("--vault-password-file", str(org / "vault-pass"))
    own = ansible_playbook(play, inventory, "-e", keys, *vault)
    assert own.rc == 0 and "state=enrolled" in own.output, own.explain()
    assert (root / MOK_KEY.lstrip("/")).read_text() == plain and plain not in own.output
    assert (root / MOK_KEY.lstrip("/")).stat().st_mode & 0o777 == 0o600
    assert (root / MOK_PUB.lstrip("/")).read_bytes() == (org / "mok.der").read_bytes()
    assert ansible_playbook(play, inventory, "-e", keys, *vault).recap()["image"]["changed"] == 0
    half = ("-e", json.dumps({"nvidia_driver_mok_key_src": str(org / "mok.key")}))
    refused = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, *secure_boot_on, *half, *vault)
    assert refused.rc == 2 and "nvidia_driver_mok_key_src and nvidia_driver_mok_certificate_src go together" in (
        failure(refused.output)
    )

    # Asking for the import without a password is refused by the input checks.
    import_on = ("-e", json.dumps({"nvidia_driver_mok_import": True}))
    no_password = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, *secure_boot_on, *import_on)
    assert no_password.rc == 2, no_password.explain()
    assert "nvidia_driver_mok_import is true: set nvidia_driver_mok_password (1-256 characters" in failure(
        no_password.output
    )
