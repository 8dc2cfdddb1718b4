"""Long-term forecasting (the S3Attention paper's Table 2): data, models and the forecasting suite kind."""
