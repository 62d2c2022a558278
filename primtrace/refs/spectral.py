"""stft and istft, eager's algorithms written in prims around the FFT prims
(``prims.spectral``).

stft: the signal (1-d, or 2-d with a batch dim) padded by n_fft // 2 on both sides when
``center`` (``pad_mode``, as F.pad pads it), cut into frames of n_fft points every hop_length
(a view, ``prims.unfold``), multiplied by the window (zero-padded to n_fft around its centre
when win_length < n_fft; promoted as ``mul``), then one FFT per frame: real frames take the
onesided DFT unless ``onesided=False``, complex ones (a complex signal or window) the full
one. The result is eager's: (batch,) freq x frames, a transposed view of the (frames, freq)
FFT output; ``return_complex=False`` views it as real pairs.

istft: the inverse FFT of each frame (``fft_c2r`` of a onesided spectrum, the first
n_fft // 2 + 1 frequencies of a full one, or ``fft_c2c`` for a complex result), times the
window, overlap-added (``prims.index_add`` at t * hop + j, eager's ``unfold_backward``), then
divided by the overlap-added squared window (the envelope), trimmed by n_fft // 2 when
``center``, to ``length`` (zero-padded beyond the signal, with eager's warning).

Eager refuses an envelope with a value below 1e-11 (the NOLA condition): the window is data,
so the check is a guard prim (``prims.check_overlap_add``) that reads it when the trace runs,
on every call.

Checks and messages are eager's (torch 2.13), in its order; sizes (n_fft, hop_length,
win_length, length) are read, so a trace is specialized on them.
"""
from __future__ import annotations

import warnings

import torch

from primtrace import dtypes, prims
from primtrace.refs import arithmetic as B
from primtrace.refs import joins
from primtrace.refs.core import exports, ref
from primtrace.refs.creation import filled
from primtrace.refs.scalars import concrete
from primtrace.refs.shape_args import as_int, legacy_type, require_tensor
from primtrace.refs.views import reshaped

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _flag(value) -> str:
    return "None" if value is None else str(int(bool(value)))


def _window_repr(window) -> str:
    return "None" if window is None else f"{legacy_type(window)}{{{list(window.shape)}}}"


def _optional_int(name, argument, value, default):
    return default if value is None else as_int(name, argument, concrete(value))


def _same_device(name, input, window):
    if window is not None and window.device != input.device:
        raise RuntimeError(f"{name} input and window must be on the same device but got self on "
                           f"{input.device} and window on {window.device}")


def _centred(window, n_fft, win_length, dtype, device):
    """The window (ones when None) zero-padded to n_fft around its centre."""
    if window is None:
        window = filled((win_length,), 1, dtype, device)
    left = (n_fft - win_length) // 2
    return joins.constant_pad_nd(window, (left, n_fft - win_length - left))


def _pad_signal(x, amount, mode):
    """x (3-d: eager's F.pad input) padded by `amount` on both sides of its last dim."""
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant" and joins.pad_declines(x, (amount, amount), mode):
        n = x.shape[-1]
        if mode == "reflect" and amount >= n and x.numel():
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                               f"input dimension, but got: padding ({amount}, {amount}) at "
                               f"dimension {x.ndim - 1} of input {list(x.shape)}")
        raise RuntimeError(f"Expected 2D or 3D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got: {list(x.shape)}")
    return joins.pad(x, (amount, amount), mode)


@ref
def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,
         pad_mode="reflect", normalized=False, onesided=None, return_complex=None,
         align_to_window=None):
    """The short-time Fourier transform: (batch,) n_freq x n_frames, complex (or real pairs
    when return_complex=False)."""
    require_tensor("stft", input)
    if window is not None:
        require_tensor("stft", window, "window", 5)
    n_fft = as_int("stft", "n_fft", concrete(n_fft), 2)
    center, normalized = bool(concrete(center)), bool(concrete(normalized))
    onesided = None if onesided is None else bool(concrete(onesided))
    return_complex = None if return_complex is None else bool(concrete(return_complex))
    align_to_window = None if align_to_window is None else bool(concrete(align_to_window))
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    if center:  # torch.stft's Python part: F.pad of the signal viewed 3-d
        ndim = input.ndim
        amount = n_fft // 2
        x = reshaped(input, (1,) * (3 - ndim) + tuple(input.shape)) if ndim < 3 else input
        x = _pad_signal(x, amount, pad_mode)
        input = reshaped(x, tuple(x.shape[3 - ndim:]) if ndim < 3 else tuple(x.shape))
    hop = _optional_int("stft", "hop_length", hop_length, n_fft >> 2)
    win = _optional_int("stft", "win_length", win_length, n_fft)
    complex_window = window is not None and window.dtype.is_complex
    if return_complex is None and not (input.dtype.is_complex or complex_window):
        raise RuntimeError("stft requires the return_complex parameter be given for real inputs, "
                           "and will further require that return_complex=True in a future "
                           "PyTorch release.")
    _same_device("stft", input, window)
    rc = return_complex if return_complex is not None else True
    what = (f"stft({legacy_type(input)}{list(input.shape)}, n_fft={n_fft}, hop_length={hop}, "
            f"win_length={win}, window={_window_repr(window)}, normalized={_flag(normalized)}, "
            f"onesided={_flag(onesided)}, return_complex={_flag(rc)}, "
            f"align_to_window={_flag(align_to_window)}) : ")
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(what + "expected a tensor of floating point or complex values")
    if input.ndim not in (1, 2):
        raise RuntimeError(what + "expected a 1D or 2D tensor")
    x = prims.unsqueeze(input, 0) if input.ndim == 1 else input
    length = x.shape[1]
    if n_fft <= 0 or n_fft > length:
        raise RuntimeError(what + f"expected 0 < n_fft < {length}, but got n_fft={win}")
    if hop <= 0:
        raise RuntimeError(what + f"expected hop_length > 0, but got hop_length={hop}")
    if win <= 0 or win > n_fft:
        raise RuntimeError(what + f"expected 0 < win_length <= n_fft, but got win_length={win}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(what + f"expected a 1D window tensor of size equal to win_length={win}"
                           f", but got window with size {list(window.shape)}")
    if win < n_fft:  # no window: ones of the signal's dtype
        window = _centred(window, n_fft, win, x.dtype, x.device)
        if not center and align_to_window:
            amount = (n_fft - win) // 2
            x = prims.squeeze(_pad_signal(prims.unsqueeze(x, 0), amount, pad_mode), (0,))
    frames = prims.unfold(x, 1, n_fft, hop)  # (batch, n_frames, n_fft), a view
    if window is not None:
        frames = B.mul(frames, window)
    norm = "ortho" if normalized else "backward"
    if frames.dtype.is_complex:
        if onesided:
            raise RuntimeError("Cannot have onesided output if window or input is complex")
        spectrum = prims.fft_c2c(frames, norm, True)
    else:
        spectrum = prims.fft_r2c(frames, norm, onesided is None or onesided)
    out = prims.permute(spectrum, (0, 2, 1))  # (batch, n_freq, n_frames), eager's transpose
    if input.ndim == 1:
        out = prims.squeeze(out, (0,))
    return out if rc else prims.view_as_real(out)


@ref
def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,
          normalized=False, onesided=None, length=None, return_complex=False):
    """The inverse of stft by overlap-add: (batch,) signal, real (complex when
    return_complex)."""
    require_tensor("istft", input)
    if window is not None:
        require_tensor("istft", window, "window", 5)
    n_fft = as_int("istft", "n_fft", concrete(n_fft), 2)
    center, normalized = bool(concrete(center)), bool(concrete(normalized))
    return_complex = bool(concrete(return_complex))
    onesided = None if onesided is None else bool(concrete(onesided))
    length = None if length is None else as_int("istft", "length", concrete(length), 9)
    _same_device("istft", input, window)
    if not input.dtype.is_complex:
        raise RuntimeError("istft requires a complex-valued input tensor matching the output "
                           "from stft with return_complex=True.")
    hop = _optional_int("istft", "hop_length", hop_length, n_fft >> 2)
    win = _optional_int("istft", "win_length", win_length, n_fft)
    if input.ndim < 2:  # eager reads sizes of the real view: (..., 2)
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim - 1}, {input.ndim}], but got {-input.ndim - 2})")
    n_frames, fft_size = input.shape[-1], input.shape[-2]
    what = (f"istft(CPU{legacy_type(input)[6:-6]}Type{list(input.shape)}, n_fft={n_fft}, "
            f"hop_length={hop}, win_length={win}, window={_window_repr(window)}, "
            f"center={_flag(center)}, normalized={_flag(normalized)}, "
            f"onesided={_flag(onesided)}, length={'None' if length is None else length}, "
            f"return_complex={_flag(return_complex)})")
    if input.numel() == 0:
        raise RuntimeError(what + " : input tensor cannot be empty.")
    if input.ndim not in (2, 3):
        raise RuntimeError(what + f" : expected a tensor with 3 or 4 dimensions, but got "
                           f"{input.ndim + 1}")
    one = onesided if onesided is not None else fft_size != n_fft
    if one and n_fft // 2 + 1 != fft_size:
        raise RuntimeError(what + " : expected the frequency dimension (3rd to the last) of the "
                           "input tensor to match n_fft / 2 + 1 when onesided=True, but got "
                           f"{fft_size}")
    if not one and n_fft != fft_size:
        raise RuntimeError(what + " : expected the frequency dimension (3rd to the last) of the "
                           f"input tensor to match n_fft when onesided=False, but got {fft_size}")
    if not 0 < hop <= win:
        raise RuntimeError(what + " : expected 0 < hop_length <= win_length")
    if not 0 < win <= n_fft:
        raise RuntimeError(what + " : expected 0 < win_length <= n_fft")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(what + " : Invalid window shape. window has to be 1D and length of "
                           "`win_length`")
    real = dtypes.to_real(input.dtype)
    w = window if window is not None else filled((win,), 1, real, input.device)
    if win != n_fft:
        w = _centred(w, n_fft, win, real, input.device)
    x = prims.unsqueeze(input, 0) if input.ndim == 2 else input
    x = prims.permute(x, (0, 2, 1))  # (channel, n_frames, fft_size)
    norm = "ortho" if normalized else "backward"
    if return_complex:
        if one:
            raise RuntimeError("Cannot have onesided output if window or input is complex")
        frames = prims.fft_c2c(x, norm, False)
    else:
        if window is not None and window.dtype.is_complex:
            raise RuntimeError("Complex windows are incompatible with return_complex=False")
        if not one:
            keep = n_fft // 2 + 1
            x = prims.slice(x, (0, 0, 0), (*x.shape[:2], keep), (1, 1, 1))
        frames = prims.fft_c2r(x, n_fft, norm)
    y = _overlap_add(B.mul(frames, w), hop)
    envelope = _overlap_add(prims.expand(prims.unsqueeze(prims.unsqueeze(B.pow(w, 2), 0), 0),
                                         (1, n_frames, n_fft)), hop)
    expected = n_fft + hop * (n_frames - 1)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else expected - n_fft // 2 if center else expected
    stop = max(min(end, expected), start)
    y = prims.slice(y, (0, start), (y.shape[0], stop), (1, 1))
    envelope = prims.slice(envelope, (0, start), (1, stop), (1, 1))
    if envelope.numel() == 0:
        raise RuntimeError("min(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    prims.check_overlap_add(envelope, what)
    y = B.true_divide(y, envelope)
    if input.ndim == 2:
        y = prims.squeeze(y, (0,))
    if end > expected:
        warnings.warn("The length of signal is shorter than the length parameter. Result is being "
                      "padded with zeros in the tail. Please check your center and hop_length "
                      "settings", stacklevel=2)
        y = joins.constant_pad_nd(y, (0, end - expected))
    return y


def _overlap_add(frames, hop):
    """(channel, n_frames, n_fft) frames summed into (channel, n_fft + hop * (n_frames - 1)):
    frame t's point j lands at t * hop + j (eager's unfold_backward)."""
    channels, n_frames, n_fft = frames.shape
    flat = reshaped(frames, (channels, n_frames * n_fft))
    k = prims.iota(n_frames * n_fft, start=0, step=1, dtype=torch.int64, device=frames.device)
    at = prims.add(prims.mul(prims.div(k, n_fft), hop), prims.remainder(k, n_fft))
    zeros = prims.full((channels, n_fft + hop * (n_frames - 1)), 0, dtype=frames.dtype,
                       device=frames.device)
    return prims.index_add(zeros, 1, at, flat, 1)


__all__ = exports(globals())
