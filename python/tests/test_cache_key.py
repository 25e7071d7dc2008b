"""The expectation cache's key file from Python (issue 35; harness/cache_key.h): entries are
authenticated with a key outside the cache folder, so a cache planted in pytest's folder is not
believed; a cache asked for whose key cannot be used is one clear error; pytest's default cache
without a usable key leaves the cache off instead of failing every item."""
import pytest

import deltacheck as dc
from deltacheck import examples

LEAKY = "deltacheck.examples:recurrent_gdr_no_reset"
CASE = "gdr(layout=packed[5,7],H=1,HV=2,K=8,V=8,seed=1)"


def test_a_key_others_can_read_is_a_runtime_error(tmp_path, monkeypatch):
    key = tmp_path / "cache.key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)
    monkeypatch.setenv("DELTACHECK_CACHE_KEY_FILE", str(key))
    with pytest.raises(RuntimeError, match="mode 0644"):
        dc.check(examples.recurrent_gdr, case=CASE, framework="numpy",
                 cache_dir=tmp_path / "cache")


def test_entries_made_under_another_key_are_misses(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DELTACHECK_CACHE_KEY_FILE", str(tmp_path / "first.key"))
    first = dc.check(examples.recurrent_gdr_no_reset, case=CASE, framework="numpy",
                     cache_dir=cache)
    before = {p: p.read_bytes() for p in cache.rglob("*.bin")}
    assert before
    # The folder alone (restored, copied, planted) without its key: recomputed, same verdicts.
    monkeypatch.setenv("DELTACHECK_CACHE_KEY_FILE", str(tmp_path / "second.key"))
    again = dc.check(examples.recurrent_gdr_no_reset, case=CASE, framework="numpy",
                     cache_dir=cache)
    assert [r.verdict for r in again.results] == [r.verdict for r in first.results]
    # Every entry was rejected and written again under the new key.
    assert all(p.read_bytes() != b for p, b in before.items())


def test_the_plugin_refuses_an_unusable_cache_it_was_given(pytester, tmp_path, monkeypatch):
    key = tmp_path / "cache.key"
    key.write_bytes(b"k" * 31)
    key.chmod(0o600)
    monkeypatch.setenv("DELTACHECK_CACHE_KEY_FILE", str(key))
    res = pytester.runpytest_subprocess(f"--deltacheck={LEAKY}", f"--deltacheck-case={CASE}",
                                        "--deltacheck-framework=numpy",
                                        f"--deltacheck-cache-dir={tmp_path / 'cache'}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    assert "31 bytes" in res.stderr.str()


def test_the_plugins_default_cache_without_a_key_is_off_not_an_error(pytester, tmp_path,
                                                                  monkeypatch):
    # The key cannot be made (as with a home that cannot be written): its folder is a file.
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("DELTACHECK_CACHE_KEY_FILE", str(blocker / "sub" / "cache.key"))
    monkeypatch.delenv("DELTACHECK_CACHE_DIR", raising=False)
    res = pytester.runpytest_subprocess(f"--deltacheck={LEAKY}", f"--deltacheck-case={CASE}",
                                        "--deltacheck-framework=numpy", "-W",
                                        "always::UserWarning")
    assert res.parseoutcomes().get("failed") == 1, res.stdout.str()  # the leak, judged
    assert "the expectation cache is off" in res.stdout.str()
