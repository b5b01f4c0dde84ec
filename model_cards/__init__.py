"""Jinja templates of the cards that travel with a checkpoint and a corpus, and of the report
of a reproduction, rendered with `huggingface_hub`'s `ModelCard` / `DatasetCard`.

    model_card.md     a checkpoint's README.md (`model_cards.render.render_model_card`)
    dataset_card.md   an exported corpus's README.md (`model_cards.render.render_dataset_card`)
    report.md         REPORT.md of `scripts/reproduce.py` (`model_cards.render.render_report`)
    results.md        the results section both the model card and the report show
    study_report.md   REPORT.md of `scripts/study.py` (`model_cards.study_reports.render_study_report`)
    diversity_report.md  REPORT.md of `scripts/diversity_report.py` (`model_cards.study_reports.render_diversity_report`)
    architectures_report.md  REPORT.md of `scripts/architectures_report.py` (`model_cards.study_reports`)
    lemma1_report.py  REPORT.md of `scripts/lemma1.py` (`model_cards.lemma1_report.render_lemma1_report`)
"""

from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent
MODEL_CARD_TEMPLATE = TEMPLATE_DIR / "model_card.md"
DATASET_CARD_TEMPLATE = TEMPLATE_DIR / "dataset_card.md"
REPORT_TEMPLATE = TEMPLATE_DIR / "report.md"
RESULTS_TEMPLATE = TEMPLATE_DIR / "results.md"
STUDY_REPORT_TEMPLATE = TEMPLATE_DIR / "study_report.md"
DIVERSITY_REPORT_TEMPLATE = TEMPLATE_DIR / "diversity_report.md"
ARCHITECTURES_REPORT_TEMPLATE = TEMPLATE_DIR / "architectures_report.md"


def status_markers(family: str) -> tuple[str, str]:
    """The two lines between which `scripts/diversity_report.py --readme FILE` rewrites the
    status block of a family of studies ("diversity", "inference") in FILE."""
    return f"<!-- {family} status: start -->", f"<!-- {family} status: end -->"


DIVERSITY_STATUS_MARKERS = status_markers("diversity")
# first line of a rendered card's body: a card with it may be rendered again (for the repo it goes to)
MODEL_CARD_MARKER = "<!-- rendered by hmm-roformer: model_cards/model_card.md -->"
DATASET_CARD_MARKER = "<!-- rendered by hmm-roformer: model_cards/dataset_card.md -->"
CITATION = """\
@article{hmm_multitask_2025,
  title   = {Transformers as Multi-task Learners: Decoupling Features in Hidden Markov Models},
  journal = {arXiv preprint arXiv:2506.01919},
  year    = {2025},
  url     = {https://arxiv.org/abs/2506.01919}
}"""
