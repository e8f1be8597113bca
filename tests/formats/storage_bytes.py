"""Read a storage's bytes with a plain seek and read: an oracle independent of ckinspect.io.blobs."""


def raw_bytes(storage) -> bytes:
    with open(storage.file, "rb") as f:
        f.seek(storage.offset)
        return f.read(storage.nbytes)
