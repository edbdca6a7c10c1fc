"""porter.runtime.threads.applied: one intra-op thread per stack, each stack's flags from its StackInfo."""

from __future__ import annotations

import os

from porter.runtime.threads import applied, decide


def test_applied_sets_each_stacks_own_one_thread_flags_and_restores_them(monkeypatch, tmp_path):
    """The one-thread flags come from each stack's StackInfo (porter.core.stacks), appended to
    what the user set, and the user's value is back after the block."""
    import torch

    from porter.core.stacks import STACKS

    mine = f"--xla_dump_to={tmp_path}"
    monkeypatch.setenv("XLA_FLAGS", mine)
    threads = torch.get_num_threads()
    with applied(decide(None, 2, "1")):
        assert torch.get_num_threads() == 1
        for info in STACKS.values():
            for var, flag in info.one_thread_flags.items():
                assert flag in os.environ[var].split(), (info.name, var)
        assert os.environ["XLA_FLAGS"].startswith(mine + " ")
    assert os.environ["XLA_FLAGS"] == mine and torch.get_num_threads() == threads
    assert any(info.one_thread_flags for info in STACKS.values())  # XLA's, at least
