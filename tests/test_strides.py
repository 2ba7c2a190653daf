"""The stride view: scenarios V1–V5, layouts without strides, requests, live link, bad input."""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
import torch
from IPython.core.error import UsageError

import forgeviz
from forgeviz.model.strides import MAX_WINDOW, addresses, format_value, storage_index


def by_name(layout, name):
    return next(t for t in layout.tensors if t.name == name)


def fact(tensor, key):
    return next(f for f in tensor.facts if f.key == key)


def ask(widget, **request):
    """Deliver a browser request the way the kernel does, and return the reply."""
    replies = []
    widget.send = lambda content, buffers=None: replies.append(content)
    widget._handle_msg({"content": {"data": {"method": "custom", "content": {"request_id": 7, **request}}},
                        "buffers": []})
    assert len(replies) == 1
    return replies[0]


def test_v1_strides_offsets_sharing_and_verdicts():
    t = torch.arange(12).reshape(3, 4)
    view = forgeviz.strides(t, t.T, t[:, 1:3], t.T.contiguous(), names=["t", "t.T", "t[:, 1:3]", "c"])
    layout = view.model
    tt, tT, sl, c = layout.tensors
    assert (tt.stride, tt.storage_offset) == (list(t.stride()), t.storage_offset()) == ([4, 1], 0)
    assert (tT.stride, tT.is_contiguous) == ([1, 4], False) == (list(t.T.stride()), t.T.is_contiguous())
    assert (sl.stride, sl.storage_offset) == ([4, 1], 1) == (list(t[:, 1:3].stride()), t[:, 1:3].storage_offset())
    # one strip for the three views, a second "copy" strip for contiguous()
    assert tt.strip == tT.strip == sl.strip == 0 and c.strip == 1
    assert [s.copy for s in layout.strips] == [False, True]
    assert t.T.contiguous().untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert fact(tT, "storage").value == "shared with t, t[:, 1:3]"
    assert fact(c, "storage").value == "copy: its own storage, not t's"
    # t.T[1, 2] reads storage element 9, as torch addresses it
    assert storage_index((1, 2), tT.stride, tT.storage_offset) == 9 == t.T[1, 2].item()
    # .view(12) fails with torch's message; .reshape(12) copies 96 bytes; t.view(4, 3) works
    view12, reshape12, contiguous = tT.verdicts
    with pytest.raises(RuntimeError) as err:
        t.T.view(12)
    assert not view12.works and view12.torch_message == str(err.value).splitlines()[0]
    assert "dims 0 and 1" in view12.reason
    assert reshape12.works and reshape12.copies and reshape12.bytes == 96 == t.T.reshape(12).untyped_storage().nbytes()
    assert contiguous.copies and contiguous.bytes == 96
    assert tt.verdicts[2].copies is False and t.contiguous() is t
    assert (ask(view, type="try", tensor=0, op="view", shape=[4, 3])["verdict"]["result_stride"]
            == list(t.view(4, 3).stride()))
    ok = ask(view, type="try", tensor=1, op="view", shape=[2, 2, 3])["verdict"]
    assert ok["works"] and ok["result_stride"] == list(t.T.view(2, 2, 3).stride())
    assert not ask(view, type="try", tensor=2, op="view", shape=[6])["verdict"]["works"]
    # numpy would say (8, 32) bytes for t.T
    assert fact(tT, "numpy_strides").value == str(tuple(t.T.numpy().strides)) == "(8, 32)"
    # values in the cells are the tensor's own
    assert tT.window.values == [str(v) for v in t.T.reshape(-1).tolist()]
    assert layout.strips[0].values == [str(v) for v in range(12)]


def test_v2_expand_reads_one_element_many_times():
    t = torch.arange(12).reshape(3, 4)
    e = t.unsqueeze(0).expand(2, 3, 4)
    layout = forgeviz.strides(t, e, names=["t", "e"]).model
    x = by_name(layout, "e")
    assert x.stride == [0, 4, 1] == list(e.stride())
    addr = addresses(x.shape, x.stride, x.storage_offset)
    assert addr[:12] == addr[12:] and len(set(addr)) == 12
    assert "24 logical elements read 12 distinct storage elements" in fact(x, "expand").reason
    assert fact(x, "writes").value == "raise"
    with pytest.raises(RuntimeError, match="more than one element"):
        e.add_(1)
    assert layout.overlaps[0].elements == 12
    works = forgeviz.strides(e).model.tensors[0]
    assert ask(forgeviz.strides(e), type="try", tensor=0, op="view", shape=[2, 12])["verdict"]["works"]
    assert works.verdicts[0].works is False  # view(-1) of an expand fails, like torch
    with pytest.raises(RuntimeError):
        e.view(-1)


def test_sharing_is_not_overlap():
    a = torch.arange(12.)
    layout = forgeviz.strides(a[0:6], a[6:12], names=["lo", "hi"]).model
    assert layout.tensors[0].strip == layout.tensors[1].strip
    assert layout.overlaps[0].elements == 0 and layout.overlaps[0].exact


def test_v4_from_numpy_shares_and_tensor_copies():
    a = np.arange(6.0).reshape(2, 3)
    view = forgeviz.strides(a, torch.from_numpy(a), torch.tensor(a), names=["a", "from_numpy(a)", "tensor(a)"])
    arr, shared, copied = view.model.tensors
    assert arr.kind == "numpy" and arr.strip == shared.strip != copied.strip
    assert fact(arr, "numpy_strides").value == str(a.strides)
    assert view.model.strips[copied.strip].copy
    # an array torch cannot view (negative strides) gets a panel, not an error
    flipped = forgeviz.strides(a[::-1], names=["a[::-1]"]).model.tensors[0]
    assert flipped.stride is None and "negative" in flipped.panel.explanation


def test_v5_permute_then_reshape_and_the_batchnorm_view():
    x = torch.arange(2 * 3 * 2 * 2.).reshape(2, 3, 2, 2)  # N, C, H, W
    p = x.permute(0, 2, 3, 1)  # N, H, W, C
    layout = forgeviz.strides(x, p, names=["x", "p"]).model
    xl, pl = layout.tensors
    assert xl.strip == pl.strip and pl.stride == list(p.stride()) == [12, 2, 1, 4]
    view, reshape, _ = pl.verdicts
    assert not view.works and reshape.copies and reshape.bytes == p.numel() * 4
    assert p.reshape(-1).untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    # The incident: x.view(N*H*W, C) "works" but each row mixes channels; the permuted reshape is right.
    wrong = ask(forgeviz.strides(x), type="try", tensor=0, op="view", shape=[8, 3])["verdict"]
    assert wrong["works"] and not torch.equal(x.view(8, 3), p.reshape(8, 3))


def test_channels_last_and_the_ambiguous_format():
    x = torch.ones(2, 3, 4, 5).to(memory_format=torch.channels_last)
    t = forgeviz.strides(x).model.tensors[0]
    assert t.stride == [60, 1, 15, 3] and t.memory_format == "channels_last" and not t.is_contiguous
    one_channel = torch.ones(2, 1, 4, 5)
    u = forgeviz.strides(one_channel).model.tensors[0]
    assert one_channel.is_contiguous() and one_channel.is_contiguous(memory_format=torch.channels_last)
    assert u.memory_format == "ambiguous" and "ambiguous" in fact(u, "memory_format").value


@pytest.mark.parametrize("make, layout_name, part_names", [
    (lambda: torch.eye(3).to_sparse(), "sparse_coo", ["indices", "values"]),
    (lambda: torch.eye(3).to_sparse_csr(), "sparse_csr", ["crow_indices", "col_indices", "values"]),
    (lambda: torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)]), "nested",
     ["component 0", "component 1"]),
    (lambda: torch.ones(2, 3).to_mkldnn(), "mkldnn", []),
])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_layouts_without_strides_get_an_explained_panel(make, layout_name, part_names):
    value = make()
    view = forgeviz.strides(value, names=["x"])
    t = view.model.tensors[0]
    assert t.stride is None and t.strip == -1 and t.panel.layout == layout_name
    assert t.panel.title == "this layout has no strides"
    assert [p.name for p in t.panel.parts] == part_names
    if layout_name == "sparse_coo":
        assert t.panel.parts[0].values == [str(v) for v in value._indices().reshape(-1).tolist()]
    assert not view.warnings
    assert ask(view, type="values", tensor=0, start=[0, 0], size=[1, 1])["type"] == "error"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_quantized_conj_and_meta():
    q = torch.quantize_per_tensor(torch.tensor([0.5, 1.0, 1.5]), 0.5, 2, torch.quint8)
    t = forgeviz.strides(q).model
    assert t.tensors[0].stride == [1] and t.tensors[0].window.values == ["0.5", "1", "1.5"]
    assert t.strips[0].dtype == "uint8" and t.strips[0].values == [str(v) for v in q.int_repr().tolist()]
    z = torch.tensor([1 + 2j, 3 - 1j]).conj()
    c = forgeviz.strides(z).model
    assert c.tensors[0].window.values == ["1-2j", "3+1j"] and fact(c.tensors[0], "conj").value == "set"
    assert c.strips[0].values == ["1+2j", "3-1j"]  # the storage is not conjugated
    m = torch.empty(3, 4, device="meta").T
    meta = forgeviz.strides(m).model.tensors[0]
    assert meta.stride == [1, 4] and not meta.has_data and meta.window is None
    assert fact(meta, "data_ptr").value == "none"


def test_requests_page_values_and_reject_bad_ones():
    big = torch.arange(100 * 100).reshape(100, 100)
    view = forgeviz.strides(big.T, names=["big.T"])
    t = view.model.tensors[0]
    assert t.window.size == [16, 16]
    reply = ask(view, type="values", tensor=0, start=[50, 60], size=[2, 3])
    assert reply["window"]["values"] == [str(v) for v in big.T[50:52, 60:63].reshape(-1).tolist()]
    reply = ask(view, type="storage", strip=0, start=9990, count=50)
    assert reply["values"] == [str(v) for v in range(9990, 10000)]  # clipped to the storage
    for bad, expected in [
        ({"type": "values", "tensor": 3, "start": [0, 0], "size": [1, 1]}, "tensor as an integer in [0, 1)"),
        ({"type": "values", "tensor": 0, "start": [0], "size": [1, 1]}, "start with 2 entries"),
        ({"type": "values", "tensor": 0, "start": [0, 0], "size": [100, 100]}, f"at most {MAX_WINDOW}"),
        ({"type": "storage", "strip": 0, "start": -1, "count": 3}, "start >= 0"),
        ({"type": "try", "tensor": 0, "op": "squeeze", "shape": [1]}, "'view' or 'reshape'"),
        ({"type": "try", "tensor": 0, "op": "view", "shape": "12"}, "shape as a list of integers"),
        ({"type": "nope"}, "unknown request type 'nope'"),
    ]:
        reply = ask(view, **bad)
        assert reply["type"] == "error" and expected in reply["message"], (bad, reply)


def test_bad_input_is_a_clear_type_error():
    with pytest.raises(TypeError, match=r"accepts torch.Tensor or numpy.ndarray arguments; got list"):
        forgeviz.strides([1, 2, 3])
    with pytest.raises(TypeError, match="at least one"):
        forgeviz.strides()
    with pytest.raises(ValueError, match="expects a list of 1 names"):
        forgeviz.strides(torch.ones(2), names=["a", "b"])


def test_huge_tensor_ships_a_bounded_window():
    huge = torch.empty(10_000, 10_000, dtype=torch.uint8)  # 1e8 elements
    huge[:20, :20] = 7
    view = forgeviz.strides(huge, huge.T, names=["huge", "huge.T"])
    sent = len(json.dumps(view.layout))
    assert sent < 64_000, sent
    t = view.model.tensors[1]
    assert len(t.window.values) == 256 and t.window.values[0] == "7"
    assert len(view.model.strips[0].values) == 256
    assert view.model.overlaps[0].exact is False and view.model.overlaps[0].elements == huge.numel()


def test_names_come_from_the_callers_variables():
    weights = torch.ones(2, 3)
    layout = forgeviz.strides(weights, weights.T).model
    assert [t.name for t in layout.tensors] == ["weights", "tensor 1"]


def test_the_view_keeps_no_tensor_alive():
    t = torch.arange(12.).reshape(3, 4)
    ref = weakref.ref(t.untyped_storage())
    view = forgeviz.strides(t, t.T, names=["t", "t.T"])  # names= : reading f_locals would pin t until return
    del t
    gc.collect()
    assert ref() is None
    view.refresh()  # nothing left to draw: keeps the last drawing, no error
    assert not view.warnings


def test_v3_live_link_redraws_every_view_after_a_write(nb):
    nb.ok("t = torch.arange(12).reshape(3, 4)")
    view = nb.ok("%fv strides t t[:2] t.T t.clone()")
    assert [x.name for x in view.model.tensors] == ["t", "t[:2]", "t.T", "t.clone()"]
    before = view.layout
    nb.ok("x = 1")  # a cell that changes nothing leaves the drawing alone
    assert view.layout is before
    nb.ok("t[:2][0] = 99")
    after = view.model
    assert after.tensors[0].window.values[:4] == ["99"] * 4 == [str(v) for v in nb["t"][0].tolist()]
    assert after.tensors[2].window.values[0::3][:4] == ["99"] * 4  # t.T's first column
    assert after.strips[0].values[:5] == ["99", "99", "99", "99", "4"]
    assert fact(after.tensors[2], "base").value == "another tensor"  # t.T's lineage survives the redraw
    clone = after.tensors[3]
    assert clone.window.values[:4] == ["0", "1", "2", "3"]  # the clone did not change...
    assert clone.facts[0].key == "freed" and after.strips[clone.strip].copy  # ...and, a temporary, is gone


def test_a_view_no_browser_draws_is_not_reread_until_one_does(nb):
    nb.ok("t = torch.arange(6)")
    view = nb.ok("%fv strides t")
    assert view.dirty  # no view has said anything yet: checked after every cell, as before
    assert ask(view, type="view", view=11) == {"type": "view", "request_id": 7}
    assert ask(view, type="gone", view=11)["type"] == "gone"
    assert not view.dirty  # its output was cleared (or its cell re-run)
    nb.ok("t[0] = 42")
    assert view.model.tensors[0].window.values[0] == "0"  # not re-read meanwhile
    ask(view, type="view", view=12)  # a view draws it again: it catches up at once
    assert view.dirty and view.model.tensors[0].window.values[0] == "42" == str(nb["t"][0].item())
    assert "expected an integer view id, got 'x'" in ask(view, type="gone", view="x")["message"]


@pytest.mark.faults_expected
def test_magic_errors_and_fault_isolation(nb, monkeypatch):
    with pytest.raises(UsageError, match="name at least one tensor"):
        nb.shell.run_line_magic("fv", "strides")
    result = nb.run("%fv strides [1, 2]")
    assert isinstance(result.error_in_exec, TypeError)
    nb.ok("t = torch.ones(3)")
    import forgeviz.widgets.strides as widgets

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(widgets, "describe", broken)
    view = nb.ok("%fv strides t")
    assert "injected fault" in view.warnings[0] and nb["t"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-only: no CUDA GPU on this machine")
def test_cuda_tensors_show_torchs_strides_shared_storage_bytes_and_values():
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    layout = forgeviz.strides(t, t.T, t[:, 1:3], t.T.contiguous(), names=["t", "t.T", "s", "c"]).model
    tt, tT, sl, c = layout.tensors
    for drawn, real in zip(layout.tensors, [t, t.T, t[:, 1:3], t.T.contiguous()]):
        assert (drawn.shape, drawn.stride, drawn.storage_offset) == (
            list(real.shape), list(real.stride()), real.storage_offset())
        assert drawn.window.values == [format_value(v) for v in real.reshape(-1).tolist()]
    assert tt.strip == tT.strip == sl.strip == 0 and c.strip == 1  # views share one storage, the copy has its own
    assert tt.device == str(t.device) == "cuda:0"
    assert fact(c, "storage").value == "copy: its own storage, not t's"
    assert layout.strips[0].values == [format_value(v) for v in t.reshape(-1).tolist()]
    assert tT.verdicts[1].bytes == t.T.reshape(12).untyped_storage().nbytes() == 48
