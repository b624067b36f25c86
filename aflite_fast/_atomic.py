"""Writing a set of output files all-or-nothing."""
import os
import uuid


def text_writer(text):
    """A writer (``write(path)``) of ``text`` as UTF-8."""
    def write(path):
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    return write


def write_files_atomically(out_dir, writers):
    """Write every ``(name, write)`` of ``writers`` into ``out_dir``, all or nothing.

    Each file is first written under a unique hidden name beside its target (same file
    system, so the rename is atomic; not mkstemp, whose 0600 mode would survive the rename)
    and renamed only once all of them exist; on any error the temporary files are removed
    and no target is touched.
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    staged = []
    try:
        for name, write in writers:
            tmp = os.path.join(out_dir, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
            staged.append((tmp, name))
            write(tmp)
        for tmp, name in staged:
            os.replace(tmp, os.path.join(out_dir, name))
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
