"""S3Attention's forecaster (Algorithms 3–4) against Algorithm 3 transcribed, and the properties it must have."""

from __future__ import annotations

import copy

import pytest
import torch

from harness.kinds.forecasting.blocks import ForecastConfig
from harness.kinds.forecasting.embed import DataEmbedding, sinusoidal_positions
from harness.kinds.forecasting.s3_forecaster import S3Forecaster


def _model(**overrides: object) -> S3Forecaster:
    torch.manual_seed(0)
    cfg = ForecastConfig(**{"input_len": 48, "horizon": 24, "variables": 3, "d_model": 16, "heads": 2,
                            "e_layers": 2, "dropout": 0.0, **overrides})
    return S3Forecaster(cfg).eval()


def _inputs(b: int = 2, n: int = 48, c: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(b, n, c).cumsum(dim=1), torch.rand(b, n, 4) - 0.5


def test_a_window_becomes_a_forecast_of_the_horizon() -> None:
    x, marks = _inputs()
    out = _model()(x, marks)
    assert out.shape == (2, 24, 3) and torch.isfinite(out).all()


def test_one_layer_equals_algorithm_3_transcribed() -> None:
    """The journal's Algorithm 3 with one encoder layer (where every reading of its loop agrees), line by line: the
    embedding reads the standardised values alone, ``self.enc_embedding(x_in)``."""
    model = _model(e_layers=1)
    x_in, marks = _inputs()
    B1, H1, C1 = x_in.shape
    tmp_mean = torch.mean(x_in[:, :, :], dim=1, keepdim=True)
    tmp_std = torch.sqrt(torch.var(x_in[:, :, :], dim=1, keepdim=True) + 1e0)
    x_std = (x_in - tmp_mean) / tmp_std
    enc_out1 = model.embed(x_std)
    enc_out1 = model.layers[0](enc_out1) + enc_out1
    dec_out = model.extrapolate(model.post(enc_out1))
    output = (dec_out.reshape(B1, -1, C1)) * (tmp_std) + tmp_mean
    torch.testing.assert_close(model(x_in, marks), output[:, -24:])


def test_layers_are_a_residual_stack() -> None:
    """With every layer's output projection zeroed, each residual branch adds nothing and the model is the
    extrapolation of post(embedding) alone."""
    model, x, marks = _model(), *_inputs()
    with torch.no_grad():
        for layer in model.layers:
            layer.out.weight.zero_()
            layer.out.bias.zero_()
    mean, std = x.mean(1, keepdim=True), (x.var(1, keepdim=True) + 1).sqrt()
    direct = model.extrapolate(model.post(model.embed((x - mean) / std)))[:, -24:] * std + mean
    torch.testing.assert_close(model(x, marks), direct)
    # and the layers do change the forecast when their projections are not zero
    assert not torch.allclose(_model()(x, marks), direct)


def test_a_shifted_window_gives_the_shifted_forecast() -> None:
    model, (x, marks) = _model(), _inputs()
    shift = torch.tensor([[[5.0, -3.0, 100.0]]])
    torch.testing.assert_close(model(x + shift, marks), model(x, marks) + shift, atol=1e-4, rtol=1e-5)


def test_same_seed_same_model_and_every_parameter_learns() -> None:
    x, marks = _inputs()
    a, b = _model(), _model()
    torch.testing.assert_close(a(x, marks), b(x, marks))
    train = copy.deepcopy(a).train()
    train(x, marks).square().mean().backward()
    silent = [name for name, p in train.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert silent == []


def test_the_embedding_sums_values_time_and_positions() -> None:
    torch.manual_seed(0)
    embed = DataEmbedding(3, 8, marks=4, dropout=0.0)
    x, marks = torch.randn(2, 10, 3), torch.randn(2, 10, 4)
    padded = torch.cat((x[:, -1:], x, x[:, :1]), dim=1)  # circular padding of one step each side
    values = torch.stack([padded[:, t:t + 3].flatten(1) for t in range(10)], dim=1)  # [B, L, 3 taps * C] windows
    kernel = embed.values.weight.permute(0, 2, 1).reshape(8, -1)  # [d_model, taps * C], tap-major like the windows
    expected = values @ kernel.T + marks @ embed.time.weight.T + sinusoidal_positions(10, 8)
    torch.testing.assert_close(embed(x, marks), expected)
    row = torch.tensor([1.0, 1.0, 0.01, 0.01])  # position 1, dim 4: rates 1 and 10000^(-2/4)
    torch.testing.assert_close(sinusoidal_positions(3, 4)[1],
                               torch.stack([row[0].sin(), row[1].cos(), row[2].sin(), row[3].cos()]))


def test_the_default_embeds_no_time_features_and_the_option_adds_them() -> None:
    """Algorithm 3 embeds the values alone: the default forecast does not change with x_mark (nor needs it);
    ``time_features=True`` (the family's ``DataEmbedding`` with ``embed=timeF``) makes it depend on x_mark."""
    x, marks = _inputs()
    other = torch.rand_like(marks) * 4 - 2
    default = _model()
    assert default.embed.time is None
    torch.testing.assert_close(default(x, marks), default(x, other), rtol=0, atol=0)
    torch.testing.assert_close(default(x, marks), default(x, None), rtol=0, atol=0)
    timed = _model(time_features=True)
    assert timed.embed.time is not None
    assert not torch.allclose(timed(x, marks), timed(x, other))
    # its embedding is the default's plus the time features' linear map
    embed = copy.deepcopy(timed.embed)
    time = embed.time
    embed.time = None
    torch.testing.assert_close(timed.embed(x, marks), embed(x) + time(marks))


def test_the_embedding_without_time_features_is_values_and_positions() -> None:
    torch.manual_seed(0)
    embed = DataEmbedding(3, 8, dropout=0.0, time_features=False)
    x = torch.randn(2, 10, 3)
    expected = embed.values(x.transpose(1, 2)).transpose(1, 2) + sinusoidal_positions(10, 8)  # DataEmbedding_onlypos
    torch.testing.assert_close(embed(x, torch.randn(2, 10, 4)), expected)
    torch.testing.assert_close(embed(x), expected)
    with pytest.raises(ValueError, match="x_mark"):
        DataEmbedding(3, 8)(x)
    with pytest.raises(ValueError, match="time_features"):
        ForecastConfig(input_len=8, horizon=4, variables=3, time_features=1)
