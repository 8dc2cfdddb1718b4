"""The kind-free report primitives every suite kind's tables and figures are built from: formats and LaTeX
(``format``, ``latex``), statistics (``stats``), figures (``plots``), the claims' verdicts (``claims``), the zoo's
groups and paper order (``groups``), and the views across stores (``export``: which kind writes a store's reports;
``compare``; ``compositional`` and ``ranking``: ``report --rank``). Each kind's own tables live in its package
(``harness/kinds/<kind>/``); nothing here imports a kind."""
