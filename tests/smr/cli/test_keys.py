"""Cluster keys on disk (smr.transport.security): what `smr keys init` and `add-client` write,
which keys a process finds, and clear errors for keys that are missing or broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.cli.root import main
from smr.transport import security
from smr.transport.security import KeysError, add_client, init_keys, keys_for, load_keys


def test_init_writes_a_cluster_pair_and_an_accepted_client_with_private_secrets(
    tmp_path: Path,
) -> None:
    directory = init_keys(tmp_path)
    keys = load_keys(directory)
    assert keys.cluster_secret is not None and len(keys.cluster_public) == 40
    assert keys.client_public != keys.cluster_public
    accepted = (directory / "clients" / "client.key").read_text()
    assert keys.client_public.decode() in accepted
    for secret in directory.glob("*.key_secret"):
        assert secret.stat().st_mode & 0o077 == 0, secret
    with pytest.raises(KeysError, match="never replaced"):
        init_keys(tmp_path)
    assert keys.client_secret.decode() not in repr(keys)  # never into a log line
    assert keys.cluster_secret is not None
    assert keys.cluster_secret.decode() not in repr(keys)


def test_an_added_client_gets_its_pair_and_the_cluster_public_key_only(tmp_path: Path) -> None:
    init_keys(tmp_path / "cluster")
    out = add_client(tmp_path / "cluster", "analytics", tmp_path / "out")
    theirs = load_keys(out)
    assert theirs.cluster_secret is None  # the cluster's secret never leaves its directory
    assert theirs.cluster_public == load_keys(tmp_path / "cluster" / "keys").cluster_public
    accepted = tmp_path / "cluster" / "keys" / "clients" / "analytics.key"
    assert theirs.client_public.decode() in accepted.read_text()
    with pytest.raises(KeysError, match="exists already"):
        add_client(tmp_path / "cluster", "analytics", tmp_path / "elsewhere")
    with pytest.raises(KeysError, match="letters, digits"):
        add_client(tmp_path / "cluster", "../x", tmp_path / "elsewhere")
    with pytest.raises(KeysError, match="missing"):
        add_client(tmp_path / "no-keys", "b", tmp_path / "elsewhere")


def test_keys_come_from_the_directory_then_the_environment_then_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(security.KEYS_ENV, raising=False)
    init_keys(tmp_path / "a")
    init_keys(tmp_path / "b")
    assert keys_for(tmp_path / "plain") is None
    assert keys_for(None) is None
    monkeypatch.setenv(security.KEYS_ENV, str(tmp_path / "b" / "keys"))
    assert keys_for(tmp_path / "a") == load_keys(tmp_path / "a" / "keys")
    assert keys_for(tmp_path / "plain") == load_keys(tmp_path / "b" / "keys")
    assert keys_for(None) == load_keys(tmp_path / "b" / "keys")


def test_broken_keys_are_named(tmp_path: Path) -> None:
    directory = init_keys(tmp_path)
    (directory / "client.key_secret").unlink()
    with pytest.raises(KeysError, match=r"client\.key_secret is missing"):
        load_keys(directory)
    (directory / "client.key_secret").write_text("not a key\n")
    with pytest.raises(KeysError, match="not a key file"):
        load_keys(directory)


def test_the_cli_says_what_it_made_and_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["keys", "init", str(tmp_path)])
    assert "keys made in" in capsys.readouterr().out
    main(["keys", "add-client", str(tmp_path), "bob", "--out", str(tmp_path / "bob")])
    assert "SMR_KEYS=" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["keys", "init", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("smr: error:") and len(err.strip().splitlines()) == 1
