"""The data model every reader fills and every command reads: tensor sizes and spans, finding severities."""

from ckinspect.model import Finding, TensorInfo, fails


def test_tensor_nbytes_and_span_follow_shape_and_stride():
    t = TensorInfo("w", "bfloat16", (4, 3), (3, 1), "0", storage_offset=2)
    assert (t.numel, t.nbytes, t.byte_offset, t.span_bytes) == (12, 24, 4, 24)
    assert t.is_contiguous
    transposed = TensorInfo("wt", "float32", (3, 4), (1, 3), "0")
    assert not transposed.is_contiguous and transposed.span_bytes == 48


def test_finding_severity_comes_from_its_code_and_gates_fail_on():
    unsafe, tmp = Finding("UNSAFE_PICKLE", "x"), Finding("LEFTOVER_TMP", "y")
    assert (unsafe.severity, tmp.severity) == ("error", "warning")
    assert fails([tmp], "warning") and not fails([tmp], "error") and not fails([unsafe], "never")
