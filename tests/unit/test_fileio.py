"""fileio.open_regular: a file inside a folder pull-request code wrote is opened below it, no link followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ds4ci import fileio
from ds4ci.fileio import NotOpened, open_regular


def tree_with_secret(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "keys" / "key.pem"
    secret.parent.mkdir()
    secret.write_text("SECRET\n")
    tree = tmp_path / "checkout"
    (tree / "out").mkdir(parents=True)
    return tree, secret


def read(path: Path, trees: tuple[Path, ...]) -> bytes:
    fd, _ = open_regular(path, trees)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def test_a_regular_file_in_the_tree_is_read_and_its_real_path_given(tmp_path: Path) -> None:
    tree, _ = tree_with_secret(tmp_path)
    (tree / "out" / "bin").write_bytes(b"\x7fELF")
    assert read(tree / "out" / "bin", (tree,)) == b"\x7fELF"
    fd, real = open_regular(tree / "out" / "bin", (tree,))
    os.close(fd)
    assert real == str((tree / "out" / "bin").resolve())


@pytest.mark.parametrize(("make", "said"), [
    (lambda tree, secret: (tree / "out" / "bin").symlink_to(secret), "out/bin is a symbolic link (to {secret})"),
    (lambda tree, secret: ((tree / "out").rmdir(), (tree / "out").symlink_to(secret.parent),
                           (secret.parent / "bin").hardlink_to(secret)), "out is a symbolic link (to {folder})"),
    (lambda tree, secret: (tree / "out" / "bin").symlink_to("bin"), "out/bin is a symbolic link (to bin)"),
    (lambda tree, secret: os.mkfifo(tree / "out" / "bin"), "is a FIFO, not a regular file"),
    (lambda tree, secret: (tree / "out" / "bin").mkdir(), "is a directory, not a regular file"),
    (lambda tree, secret: None, "out/bin does not exist"),
])
def test_a_link_a_fifo_a_folder_or_nothing_in_the_tree_is_refused_by_its_kind(tmp_path: Path, make: object, said: str) -> None:
    tree, secret = tree_with_secret(tmp_path)
    make(tree, secret)  # type: ignore[operator]
    with pytest.raises(NotOpened) as refused:
        read(tree / "out" / "bin", (tree,))
    assert said.format(secret=secret, folder=secret.parent) in str(refused.value)
    assert "SECRET" not in str(refused.value)


def test_dot_dot_is_taken_lexically_and_never_climbs_out_through_a_link(tmp_path: Path) -> None:
    tree, secret = tree_with_secret(tmp_path)
    (tree / "out" / "up").symlink_to(secret.parent)
    with pytest.raises(NotOpened, match="is a symbolic link"):
        read(tree / "out" / "up" / "key.pem", (tree,))
    (tree / "key.pem").write_text("in the tree\n")
    assert read(tree / "out" / "up" / ".." / ".." / "key.pem", (tree,)) == b"in the tree\n"  # the tree's own, no link


def test_a_trusted_path_outside_the_trees_may_use_the_runners_links_and_a_loop_is_said(tmp_path: Path) -> None:
    tree, secret = tree_with_secret(tmp_path)
    current = tmp_path / "current"
    current.symlink_to(secret.parent)
    assert read(current / "key.pem", (tree,)) == b"SECRET\n"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(NotOpened, match="symbolic link loop"):
        read(loop, (tree,))


@pytest.fixture(params=["openat2", "walk"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of opening beneath a folder: openat2, and the O_NOFOLLOW walk a kernel without it gets."""
    if request.param == "walk":
        monkeypatch.setattr(fileio, "_openat2_missing", [True])  # as after the kernel answered ENOSYS once
    else:
        top = os.open("/", os.O_PATH)
        try:
            found = fileio._openat2(top, "tmp", os.O_PATH)
        finally:
            os.close(top)
        if found is None:
            pytest.skip("this kernel has no openat2")
        os.close(found)
    return str(request.param)


@pytest.mark.parametrize("where", ["checkout", "checkout/out", "checkout/out/bin", "checkout/out/bin/server"])
def test_a_link_anywhere_beneath_or_at_the_tree_root_is_refused_by_either_way(tmp_path: Path, kernel: str,
                                                                              where: str) -> None:
    tree, secret = tree_with_secret(tmp_path)
    (tree / "out" / "bin").mkdir()
    (tree / "out" / "bin" / "server").write_bytes(b"\x7fELF")
    link = tmp_path / where
    real = link.rename(link.with_name(link.name + ".real"))
    link.symlink_to(secret if where.endswith("server") else real)
    with pytest.raises(NotOpened, match=f"{link} is a symbolic link"):
        read(tree / "out" / "bin" / "server", (tree,))
    from ds4ci.supervisor import resolve

    with pytest.raises(resolve.PathRefused, match=f"server_bin = .*: {link} is a symbolic link"):
        resolve.open_path("server_bin", tree / "out" / "bin" / "server", (tree,))
    link.unlink()
    real.rename(link)
    assert read(tree / "out" / "bin" / "server", (tree,)) == b"\x7fELF"  # the same path, no link: opened


# --- write_new: ds4ci's own output, never through a link ---------------------------------------------------------

def test_write_new_writes_a_new_file_and_replaces_a_regular_one_leaving_no_temporary_file(tmp_path: Path) -> None:
    from ds4ci.fileio import write_new

    out = tmp_path / "made" / "junit.xml"
    write_new(out, b"one")
    write_new(out, b"two")
    assert out.read_bytes() == b"two" and sorted(p.name for p in out.parent.iterdir()) == ["junit.xml"]


@pytest.mark.parametrize("kind", ["link", "dangling", "folder"])
def test_write_new_refuses_a_link_or_a_folder_at_the_name_and_leaves_the_target_alone(tmp_path: Path, kind: str) -> None:
    from ds4ci.fileio import NotWritten, write_new

    key = tmp_path / "key.pem"
    key.write_text("SECRET\n")
    out = tmp_path / "out" / "junit.xml"
    out.parent.mkdir()
    if kind == "link":
        out.symlink_to(key)
    elif kind == "dangling":
        out.symlink_to(tmp_path / "made-by-the-write")
    else:
        out.mkdir()
    with pytest.raises(NotWritten, match="symbolic link" if kind != "folder" else "a directory"):
        write_new(out, b"<xml/>")
    assert key.read_text() == "SECRET\n" and not (tmp_path / "made-by-the-write").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["junit.xml"]


def test_write_new_refuses_a_linked_folder(tmp_path: Path) -> None:
    from ds4ci.fileio import NotWritten, write_new

    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(NotWritten, match="linked is a symbolic link"):
        write_new(tmp_path / "linked" / "results.json", b"{}")
    assert not list((tmp_path / "real").iterdir())


def test_an_output_inside_a_checkout_is_refused(tmp_path: Path) -> None:
    from ds4ci.errors import UsageError
    from ds4ci.fileio import checkout_holding, refuse_inside_checkout

    (tmp_path / "repo" / ".git").mkdir(parents=True)
    assert checkout_holding(tmp_path / "repo" / "reports" / "new") == tmp_path / "repo"
    assert checkout_holding(tmp_path / "elsewhere") is None
    with pytest.raises(UsageError, match=r"--output .*inside the checkout .*repo"):
        refuse_inside_checkout(tmp_path / "repo" / "reports" / "x.xml", "--output")
    with pytest.raises(UsageError, match="inside the checkout"):
        refuse_inside_checkout(tmp_path / "tree" / "x.xml", "--junit-xml", (tmp_path / "tree",))
    refuse_inside_checkout(tmp_path / "elsewhere" / "x.xml", "--output", (tmp_path / "tree",))
