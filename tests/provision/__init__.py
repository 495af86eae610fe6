"""Helpers for the provisioning tests: chroot inventories, a local file server standing in for PyPI and NVIDIA's
repository, NVIDIA's PyPI wheels cached outside the clone, and a signed apt mirror built at test time.

(Named `provision`, not `ansible`: with tests/ on sys.path a package named `ansible` would shadow Ansible.)"""
