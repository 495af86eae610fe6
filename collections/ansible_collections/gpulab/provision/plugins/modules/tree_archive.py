#!/usr/bin/python
"""Documentation of the tree_archive action (it runs on the controller: plugins/action/tree_archive.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tree_archive
short_description: Pack a controller directory into a reproducible tar named by its content
description:
  - Runs on the controller. Writes C(<cache_dir>/<prefix>-<hash>.tar) holding C(<basename of src>/...) with fixed
    modification times, owners and modes, so unchanged content gives the same archive and C(unarchive) on the
    node reports ok. Caches and compiled files (C(__pycache__), C(*.pyc)) are left out.
version_added: "0.1.0"
author: gpulab
options:
  src:
    description: Directory to pack.
    type: path
    required: true
  cache_dir:
    description: Controller directory the archive is written to.
    type: path
    required: true
  prefix:
    description: File name prefix of the archive.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Pack the validation suite
  gpulab.provision.tree_archive:
    src: "{{ playbook_dir }}/validate"
    cache_dir: "{{ playbook_dir }}/build/gpulab-bundles"
    prefix: validate
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: Controller path of the archive.
  type: str
  returned: always
files:
  description: Number of files packed.
  type: int
  returned: always
"""
