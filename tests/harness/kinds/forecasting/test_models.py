"""Every forecaster (harness.kinds.forecasting.models): the right model per attention, the forecast's shape, gradients
to every parameter, determinism under a seed, and no dependence on anything but the history and the time features."""

from __future__ import annotations

import pytest
import torch

from harness.kinds.forecasting.blocks import DecompositionForecaster, ForecastConfig, TransformerForecaster
from harness.kinds.forecasting.models import ARCHITECTURES, architecture, build_forecaster
from harness.kinds.forecasting.s3_forecaster import S3Forecaster

NAMES = ["s3attention", "fedformer_fourier", "fedformer_wavelet", "autocorrelation", "probsparse", "logsparse",
         "reformer", "vanilla"]


def _inputs(cfg: ForecastConfig, batch: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, cfg.input_len, cfg.variables, generator=g),
            torch.randn(batch, cfg.input_len, cfg.marks, generator=g),
            torch.randn(batch, cfg.horizon, cfg.marks, generator=g))


def test_each_attention_runs_in_its_papers_model() -> None:
    assert {n: architecture(n)[0] for n in NAMES} == {
        "s3attention": "S3Attention", "fedformer_fourier": "FEDformer-f", "fedformer_wavelet": "FEDformer-w",
        "autocorrelation": "Autoformer", "probsparse": "Informer", "logsparse": "LogTrans", "reformer": "Reformer",
        "vanilla": "Transformer"}
    assert architecture("reformer_h4")[0] == "Reformer" and architecture("s3attention_released")[0] == "S3Attention"
    assert len(ARCHITECTURES) == 7
    cfg = ForecastConfig(input_len=32, horizon=16, variables=2, d_model=8, heads=2, d_ff=16)
    assert isinstance(build_forecaster("s3attention", cfg), S3Forecaster)
    assert isinstance(build_forecaster("fedformer_fourier", cfg), DecompositionForecaster)
    wavelet = build_forecaster("fedformer_wavelet", cfg)
    assert isinstance(wavelet, DecompositionForecaster)
    assert type(wavelet.decoder[0].cross_attention).__name__ == "WaveletCrossAttention"
    assert isinstance(build_forecaster("autocorrelation", cfg), DecompositionForecaster)
    informer = build_forecaster("probsparse", cfg)
    assert isinstance(informer, TransformerForecaster) and informer.distil is not None
    assert build_forecaster("logsparse", cfg).distil is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("input_len", "horizon"), [(48, 24), (36, 60)])
def test_forecast_shape_gradients_and_determinism(name: str, input_len: int, horizon: int) -> None:
    cfg = ForecastConfig(input_len=input_len, horizon=horizon, variables=3, d_model=16, heads=2, d_ff=32,
                         e_layers=2, d_layers=1, dropout=0.0)
    torch.manual_seed(0)
    model = build_forecaster(name, cfg)
    x, x_mark, y_mark = _inputs(cfg)
    out = model(x, x_mark, y_mark)
    assert out.shape == (3, horizon, 3) and torch.isfinite(out).all()
    out.square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, missing
    torch.manual_seed(0)
    again = build_forecaster(name, cfg)
    torch.testing.assert_close(again(x, x_mark, y_mark), out, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_each_row_is_forecast_from_its_own_window(name: str) -> None:
    """Rows of a batch do not mix: a row's forecast is the same alone or beside others (eval mode; the draws that
    ProbSparse's key sample and Reformer's rotations make per call are shared by the batch, so seeded alike)."""
    cfg = ForecastConfig(input_len=48, horizon=24, variables=2, d_model=16, heads=2, d_ff=32)
    torch.manual_seed(0)
    model = build_forecaster(name, cfg).eval()
    x, x_mark, y_mark = _inputs(cfg, batch=4)
    with torch.no_grad():
        torch.manual_seed(5)
        together = model(x, x_mark, y_mark)
        torch.manual_seed(5)
        alone = model(x[2:3], x_mark[2:3], y_mark[2:3])
    torch.testing.assert_close(alone, together[2:3], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_the_suites_attention_config_reaches_the_attention(name: str) -> None:
    """A suite's `config` (here the attention's own dropout) overrides the model's for the attention layers."""
    cfg = ForecastConfig(input_len=48, horizon=24, variables=2, d_model=16, heads=2, d_ff=32, dropout=0.05,
                         attention={"dropout": 0.3})
    model = build_forecaster(name, cfg)
    configs = [m.cfg for m in model.modules() if hasattr(m, "cfg") and hasattr(m.cfg, "max_seq_len")]
    assert configs and all(c.dropout == 0.3 for c in configs)


@pytest.mark.parametrize(("name", "causal"), [("probsparse", True), ("vanilla", True), ("logsparse", True),
                                              ("reformer", True), ("linformer", False)])
def test_the_decoders_self_attention_is_masked_where_the_variant_has_a_causal_form(name: str, causal: bool) -> None:
    """As the authors' decoders mask theirs (``mask_flag``): a variant's causal form, where it has one."""
    cfg = ForecastConfig(input_len=64, horizon=32, variables=2, d_model=16, heads=2, d_ff=32)
    model = build_forecaster(name, cfg)
    assert isinstance(model, TransformerForecaster)
    assert all(layer.self_attention.attention.cfg.causal is causal for layer in model.decoder)
    assert not any(layer.attention.attention.cfg.causal for layer in model.encoder)
