"""Fix recipes as catalogue data: every built-in recipe parses, bad shapes are one-line errors,
and settings that clash are not combined."""

from __future__ import annotations

import pytest

from porter.analysis.fixes import load_catalogue
from porter.analysis.recipes import RUNNABLE_HERE, combine
from porter.core.errors import PorterError


def test_builtin_recipes_cover_the_cpu_stacks_and_say_what_they_change():
    cat = load_catalogue()
    for stack, fewest in (("inductor-cpp", 4), ("xla-cpu", 4), ("torch-cpu", 2), ("ort", 2)):
        recipes = cat.recipes(stack)
        assert len(recipes) >= fewest, stack
        assert all(r.changes and r.runnable_here == "" for r in recipes)
        assert len({r.name for r in recipes}) == len(recipes)  # --try names are unique per stack
    gpu = [r for s in ("cuda", "rocm", "inductor-triton", "xla-gpu", "xla-tpu") for r in cat.recipes(s)]
    assert {r.name for r in gpu} >= {"tf32", "cudnn-benchmark", "tunableop", "reduce-overhead", "xla-tpu-default-precision"}
    assert all(r.stack not in RUNNABLE_HERE and "lent" in r.runnable_here for r in gpu)
    assert cat.get("matmul-precision-flag").apply["inductor-cpp"][1].settings == {"autocast": "bf16"}


@pytest.mark.parametrize("body, message", [
    ('name = "x"\nchanges = "c"\nnumerics = true\nno_such = 1', "unknown setting 'no_such'"),
    ('name = "x"\nchanges = "c"\nnumerics = true\nxla_options = { a = 1 }', "does not apply to inductor-cpp"),
    ('name = "x"\nchanges = "c"\ncompile_mode = "max-autotune"', "'numerics' must be true or false"),
    ('name = "x"\nchanges = "c"\nnumerics = false\ncompile_mode = "fastest"', "'compile_mode' must be one of"),
    ('name = "Bad Name"\nchanges = "c"\nnumerics = false\nchannels_last = true', "name must be lower-case"),
])
def test_a_bad_recipe_is_a_one_line_error(tmp_path, body, message):
    user = tmp_path / "fixes.toml"
    user.write_text(f'[[fix]]\nid = "vendor-gemm-tuning"\n[[fix.apply.inductor-cpp]]\n{body}\n')
    with pytest.raises(PorterError, match=message) as err:
        load_catalogue(user)
    assert "\n" not in str(err.value)


def test_clashing_settings_are_not_combined():
    cat = {r.name: r for r in load_catalogue().recipes("inductor-cpp")}
    assert combine((cat["freezing"], cat["cpp-wrapper"])) == {"inductor": {"freezing": True, "cpp_wrapper": True}}
    assert combine((cat["max-autotune"], cat["channels-last"])) == {"compile_mode": "max-autotune-no-cudagraphs",
                                                                     "channels_last": True}
    xla = {r.name: r for r in load_catalogue().recipes("xla-cpu")}
    assert combine((xla["xla-highest-precision"], xla["xla-highest-precision"])) is not None
    from dataclasses import replace
    other = replace(cat["freezing"], name="no-freezing", settings={"inductor": {"freezing": False}})
    assert combine((cat["freezing"], other)) is None
