"""Direct I/O helpers on a real file system (XFS here) and on ramfs, which has no O_DIRECT."""

import os
import subprocess

import numpy as np
import pytest

from pipeline.storage.directio import PAGE, AppendWriter, FileContents, read_ranges
from pipeline.storage.fsutil import Checksum, file_checksum


@pytest.fixture(params=["disk", "ramfs"])
def directory(request, tmp_path):
    """A directory on the test disk, or on a ramfs mount (O_DIRECT refused: the buffered fallback)."""
    if request.param == "disk":
        yield tmp_path
        return
    mount = tmp_path / "ramfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_append_writer_writes_exactly_the_bytes_and_checksums_them(directory):
    pieces = [
        random_bytes(n, seed) for seed, n in enumerate([1, 4095, 4096, 10_000, 3, 50_000, 8191, 0, 777])
    ]
    checksum = Checksum()
    path = directory / "out.bin"
    writer = AppendWriter(path, buffer_bytes=4 * PAGE, on_data=checksum.update)  # pieces span buffers
    for piece in pieces:
        writer.write(piece)
    writer.close()
    expected = np.concatenate(pieces).tobytes()
    assert path.read_bytes() == expected  # the last buffer's padding is truncated away
    assert writer.size == len(expected) and checksum.text() == file_checksum(path)
    assert writer.direct is (directory.name != "ramfs")


def test_append_writer_abort_releases_the_file(tmp_path):
    writer = AppendWriter(tmp_path / "out.bin", buffer_bytes=PAGE)
    writer.write(random_bytes(3 * PAGE + 5))
    writer.abort()
    with pytest.raises(OSError):  # its descriptor is closed
        os.fstat(writer._fd)


def test_read_ranges_returns_each_range_merging_neighbours(directory):
    data = {name: random_bytes(5 * PAGE + 321, seed) for seed, name in enumerate(["a.bin", "b.bin"])}
    for name, content in data.items():
        (directory / name).write_bytes(content.tobytes())
    a, b = directory / "a.bin", directory / "b.bin"
    # Unordered; touching, overlapping and unaligned ranges; a range ending at the file's end; two files.
    requests = [(b, 100, 5000), (a, 0, 10), (a, 10, 4086), (a, 4096, 4096), (a, 50, 20), (b, 19000, 1001)]
    requests.append((a, 5 * PAGE, 321))
    buffer = np.zeros(0, np.uint8)
    views, buffer = read_ranges(requests, True, buffer)
    for (path, offset, length), view in zip(requests, views, strict=True):
        assert np.array_equal(view, data[path.name][offset : offset + length]), (path.name, offset, length)
    again, same = read_ranges(requests[:2], True, buffer)  # the grown buffer is reused
    assert same is buffer and np.array_equal(again[0], data["b.bin"][100:5100])


def test_read_ranges_of_scattered_records_buffer_about_what_was_asked(directory):
    """Short records a few records apart (as records sorted by length lie in every part): each is read
    alone, so the buffer holds about the bytes asked for, not the span they are scattered over."""
    content = random_bytes(4 << 20)
    path = directory / "part.bin"
    path.write_bytes(content.tobytes())
    offsets = np.arange(0, content.size - 1000, 1000)  # 200-byte records 800 bytes apart
    requests = [(path, int(o), 200) for o in offsets]
    requests += [(path, int(o) + 200 + 32, 16) for o in offsets]  # a second field 32 framing bytes on
    views, buffer = read_ranges(requests, True, np.zeros(0, np.uint8))
    for (_, offset, length), view in zip(requests, views, strict=True):
        assert np.array_equal(view, content[offset : offset + length])
    asked = sum(length for _, _, length in requests)
    assert buffer.size <= 2 * asked  # the fields and framing of each record: one read; whole file: 4.5x


def test_read_ranges_past_the_end_names_the_file(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(random_bytes(1000).tobytes())
    with pytest.raises(OSError, match=r"short\.bin"):
        read_ranges([(path, 900, 200)], True, np.zeros(0, np.uint8))


def test_file_contents_in_order_with_errors_and_large_files(directory):
    # empty, tiny, a page, a cube file, larger than a buffer, exactly a buffer (1 MB), a small one after them
    sizes = [0, 1, 4096, 137_228, 3 << 20, 1 << 20, 5000]
    paths = []
    for i, n in enumerate(sizes):
        paths.append(directory / f"f{i}.h5")
        paths[-1].write_bytes(random_bytes(n, i).tobytes())
    paths.insert(2, directory / "missing.h5")
    paths.append(directory / "skipped.nc")
    for depth, threads in [(0, 1), (1, 1), (3, 2), (32, 1), (32, 4)]:
        seen = []
        for path, image in FileContents(paths, depth, True, lambda p: p.suffix == ".h5", threads):
            seen.append(path)
            if path.name == "missing.h5":
                assert isinstance(image, FileNotFoundError)
            elif path.name == "skipped.nc":
                assert image is None  # not wanted: left to its reader
            else:
                assert image.tobytes() == path.read_bytes(), (depth, threads, path.name)
        assert seen == paths
