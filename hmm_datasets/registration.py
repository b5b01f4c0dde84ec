"""Make `load_dataset("hmm_mixture", ...)` find the `HMMMixture` builder.

datasets 5 has no public hook for a builder that lives in an installed package (loading
scripts are gone). `load_dataset` resolves a name through
`datasets.load.dataset_module_factory`, which returns a `DatasetModule` (the import path
of the builder's module and a cache hash). We wrap that function so the name
`hmm_mixture` resolves to `hmm_datasets.hmm_mixture`; every other name goes through
untouched. This module is the only place that touches datasets' internals; if they
move, `register` raises `RegistrationError` and the builder-class route
(`hmm_datasets.load_hmm_mixture`) still works.
"""

from __future__ import annotations

import functools
import inspect

DATASET_NAME = "hmm_mixture"
BUILDER_MODULE = "hmm_datasets.hmm_mixture"
_MARK = "_wraps_hmm_mixture"


class RegistrationError(RuntimeError):
    """datasets' internals changed: `load_dataset("hmm_mixture")` cannot be registered."""


def register() -> None:
    """Route `load_dataset("hmm_mixture", ...)` to our builder (idempotent)."""
    try:
        from datasets import load as datasets_load
        from datasets.load import DatasetModule

        original = datasets_load.dataset_module_factory
        first_parameter = next(iter(inspect.signature(original).parameters))
        module_fields = set(inspect.signature(DatasetModule).parameters)
    except (ImportError, AttributeError, StopIteration, TypeError, ValueError) as error:
        raise _moved(f"{type(error).__name__}: {error}") from error
    if first_parameter != "path" or not {"module_path", "hash", "builder_kwargs"} <= module_fields:
        raise _moved(f"dataset_module_factory({first_parameter}, ...) / DatasetModule{sorted(module_fields)}")
    if getattr(original, _MARK, False):
        return

    from . import hmm_mixture

    @functools.wraps(original)
    def dataset_module_factory(path, *args, **kwargs):
        if path == DATASET_NAME:
            return DatasetModule(
                module_path=BUILDER_MODULE,
                hash=hmm_mixture.generator_code_hash(),
                builder_kwargs={"dataset_name": DATASET_NAME},
            )
        return original(path, *args, **kwargs)

    setattr(dataset_module_factory, _MARK, True)
    datasets_load.dataset_module_factory = dataset_module_factory


def _moved(detail: str) -> RegistrationError:
    import datasets

    return RegistrationError(
        f"cannot register load_dataset({DATASET_NAME!r}) with datasets {datasets.__version__}: its "
        f"internals moved ({detail}). hmm-roformer supports datasets>=5,<6. Use the builder "
        f"directly instead: hmm_datasets.load_hmm_mixture('small', split='train'), or "
        f"hmm_datasets.HMMMixture(config_name='small') with download_and_prepare()/as_dataset()."
    )
