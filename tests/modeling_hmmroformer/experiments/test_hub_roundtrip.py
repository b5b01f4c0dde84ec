"""The Hub round trip on the real clients: `scripts/push_to_hub.py` (huggingface_hub) to the Hub
server of `tests/hub_server.py` on 127.0.0.1, then `from_pretrained`, `load_dataset`,
`load_hmm_params` and the analysis scripts by repo id, each in a fresh process (the endpoint is
read when huggingface_hub is imported, and the suite runs offline)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import hmm_datasets
import modeling_hmmroformer  # noqa: F401 - registers the Auto classes for the local reference
from modeling_hmmroformer.experiments.hub import plan_dataset_upload, plan_model_upload

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_MODULES = ("hmm_datasets", "modeling_hmmroformer", "probing", "model_cards")
MODEL, CORPUS = "org/hmm-roformer-tiny", "org/hmm-mixture-tiny"


def stored_head(root: Path, repo_key: str) -> str:
    """The commit `main` points at, as the server whose state is under `root` stored it."""
    return json.loads((root / "repos.json").read_text())[repo_key]["refs"]["main"]


class HubServer:
    """`tests/hub_server.py` in its own process, state under `root`."""

    def __init__(self, root: Path, fault: str | None = None):
        self.root = root
        command = [sys.executable, str(ROOT / "tests" / "hub_server.py"), "--root", str(root), "--port", "0"]
        if fault:
            command += ["--fault", fault]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def requests(self) -> list[str]:
        log = self.root / "requests.log"
        return log.read_text().splitlines() if log.is_file() else []

    def head(self, repo_key: str) -> str:
        return stored_head(self.root, repo_key)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    server = HubServer(tmp_path_factory.mktemp("hub"))
    yield server
    server.stop()


def client_env(hub: HubServer, home: Path) -> dict:
    """The environment of a client process: this server, plain LFS, its own cache, a token, and
    this process's torch threads (numbers computed here and there are compared exactly)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(home),
        HF_TOKEN="hf_round_trip_test",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        OMP_NUM_THREADS=str(torch.get_num_threads()),
    )
    return env


def run_client(
    hub: HubServer, folder: Path, source: str, *, plugin: bool = True
) -> subprocess.CompletedProcess:
    """Python `source` in a fresh process talking to `hub` (no module of this package importable
    unless `plugin`); its working folder and Hub cache are under `folder`."""
    blocker = "" if plugin else f"import sys\nfor name in {PLUGIN_MODULES!r}:\n    sys.modules[name] = None\n"
    return run_in(hub, folder, ["-c", blocker + textwrap.dedent(source)])


def run_in(hub: HubServer, folder: Path, arguments: list[str]) -> subprocess.CompletedProcess:
    """`python *arguments` in a fresh client process of `hub`, working in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=folder,
        env=client_env(hub, folder / "hf_home"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# The client retries a failed request 5 times, waiting 1, 2, 4, 8, 8 s: the fault tests keep the
# retries and cut the waits to 10 ms.
SHORT_BACKOFF = (
    "import runpy, sys, time\n"
    "_sleep = time.sleep\n"
    "time.sleep = lambda seconds: _sleep(min(seconds, 0.01))\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def run_client_script(
    hub: HubServer, folder: Path, script: str, *arguments: str, short_backoff: bool = False
) -> subprocess.CompletedProcess:
    launcher = ["-c", SHORT_BACKOFF] if short_backoff else []
    return run_in(hub, folder, [*launcher, str(ROOT / "scripts" / script), *arguments])


def checked(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def published(hub, reproduced_tiny, tmp_path_factory):
    """The tiny reproduction's corpus and model (private), pushed by the script."""
    out, _ = reproduced_tiny
    folder = tmp_path_factory.mktemp("push")
    corpus = checked(
        run_client_script(
            hub, folder, "push_to_hub.py", "--dataset", str(out / "corpus"), "--repo-id", CORPUS
        )
    )
    model = checked(
        run_client_script(
            hub,
            folder,
            "push_to_hub.py",
            "--model",
            str(out / "model"),
            "--repo-id",
            MODEL,
            "--dataset-repo-id",
            CORPUS,
            "--private",
        )
    )
    assert f"uploaded: {hub.url}/datasets/{CORPUS}/commit/" in corpus
    assert f"uploaded: {hub.url}/{MODEL}/commit/" in model
    return out


def local_logits(model_folder: Path, ids: np.ndarray) -> np.ndarray:
    model = AutoModelForCausalLM.from_pretrained(model_folder).eval()
    with torch.no_grad():
        return model(torch.as_tensor(ids)).logits.numpy()


def test_the_server_holds_exactly_the_planned_files(hub, published):
    for kind, repo_id, plan in (
        ("model", MODEL, plan_model_upload(published / "model", MODEL, private=True, dataset_repo_id=CORPUS)),
        ("dataset", CORPUS, plan_dataset_upload(published / "corpus", CORPUS)),
    ):
        record = json.loads((hub.root / "repos.json").read_text())[f"{kind}:{repo_id}"]
        files = record["commits"][record["refs"]["main"]]["files"]
        assert sorted(files) == [planned.path_in_repo for planned in plan.files]
        for planned in plan.files:
            content = planned.content if planned.content is not None else planned.source.read_bytes()
            assert files[planned.path_in_repo]["sha256"] == hashlib.sha256(content).hexdigest()
        assert files["README.md"]["lfs"] is False and any(entry["lfs"] for entry in files.values())
        assert record["private"] is (kind == "model")


def test_the_model_loads_by_repo_id_without_the_plugin_and_with_it(hub, published, tmp_path):
    out = published
    ids = hmm_datasets.open_corpus(str(out / "corpus")).splits["test"].with_format("numpy")["input_ids"][:4]
    np.save(tmp_path / "ids.npy", ids)
    without = f"""
        import json, numpy as np, torch
        from huggingface_hub import HfApi, ModelCard
        from transformers import AutoModel, AutoModelForCausalLM
        ids = torch.as_tensor(np.load("{tmp_path / "ids.npy"}"))
        lm = AutoModelForCausalLM.from_pretrained("{MODEL}", trust_remote_code=True).eval()
        base = AutoModel.from_pretrained("{MODEL}", trust_remote_code=True).eval()
        with torch.no_grad():
            np.save("logits.npy", lm(ids).logits.numpy())
            np.save("hidden.npy", base(ids).last_hidden_state.numpy())
        card = ModelCard.load("{MODEL}")
        results = [[r.metric_type, r.metric_value, r.dataset_type] for r in card.data.eval_results]
        print(json.dumps({{"class": type(lm).__name__, "base": type(base).__name__,
                          "private": HfApi().model_info("{MODEL}").private, "results": results}}))
    """
    report = json.loads(
        checked(run_client(hub, tmp_path / "without", without, plugin=False)).splitlines()[-1]
    )
    reference = local_logits(out / "model", ids)
    np.testing.assert_array_equal(np.load(tmp_path / "without" / "logits.npy"), reference)
    assert (report["class"], report["base"], report["private"]) == (
        "HMMRoFormerForCausalLM",
        "HMMRoFormerModel",
        True,
    )
    assert np.load(tmp_path / "without" / "hidden.npy").shape == (*ids.shape, 32)
    # model-index: the pushed card's numbers are the pushed figure1.json's
    figure1 = json.loads((out / "model" / "figure1" / "figure1.json").read_text())["model_vs_bayes"]
    by_type = {metric: (value, dataset) for metric, value, dataset in report["results"]}
    assert by_type["agreement"] == (round(figure1["agreement"], 4), CORPUS)
    assert by_type["kl_divergence"] == (round(figure1["kl_bayes_model"], 4), CORPUS)

    with_plugin = f"""
        import numpy as np, torch
        import modeling_hmmroformer
        from transformers import AutoModelForCausalLM
        lm = AutoModelForCausalLM.from_pretrained("{MODEL}").eval()  # no trust_remote_code
        with torch.no_grad():
            np.save("logits.npy", lm(torch.as_tensor(np.load("{tmp_path / "ids.npy"}"))).logits.numpy())
    """
    checked(run_client(hub, tmp_path / "with", with_plugin))
    np.testing.assert_array_equal(np.load(tmp_path / "with" / "logits.npy"), reference)


def test_the_corpus_loads_by_repo_id_with_its_parameters(hub, published, tmp_path):
    out = published
    source = f"""
        import json, numpy as np
        from datasets import load_dataset
        from huggingface_hub import DatasetCard
        import hmm_datasets
        ds = load_dataset("{CORPUS}")
        arrays = {{f"{{split}}/{{column}}": ds[split].with_format("numpy")[column]
                  for split in ds for column in ds[split].column_names}}
        np.savez("splits.npz", **arrays)
        params = hmm_datasets.load_hmm_params("{CORPUS}")
        np.savez("params.npz", transitions=params.transitions, emissions=params.emissions)
        ids = ds["test"].with_format("numpy")["input_ids"][:8]
        probs = hmm_datasets.BayesOptimalPredictor(params).next_token_probs(ids)
        np.save("bayes.npy", probs.cpu().numpy())
        card = DatasetCard.load("{CORPUS}", repo_type="dataset")
        print(json.dumps({{"configs": card.data.configs, "splits": sorted(ds)}}))
    """
    report = json.loads(checked(run_client(hub, tmp_path, source)).splitlines()[-1])
    local = hmm_datasets.open_corpus(str(out / "corpus"))
    pushed = np.load(tmp_path / "splits.npz")
    assert report["splits"] == sorted(local.splits)
    expected = {
        f"{split}/{column}": local.splits[split].with_format("numpy")[column]
        for split in local.splits
        for column in local.splits[split].column_names
    }
    assert sorted(pushed.files) == sorted(expected)
    for key, values in expected.items():
        np.testing.assert_array_equal(pushed[key], values, err_msg=key)
    params = np.load(tmp_path / "params.npz")
    np.testing.assert_array_equal(params["transitions"], local.params.transitions)
    np.testing.assert_array_equal(params["emissions"], local.params.emissions)
    ids = local.splits["test"].with_format("numpy")["input_ids"][:8]
    bayes = hmm_datasets.BayesOptimalPredictor(local.params).next_token_probs(ids).cpu().numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "bayes.npy"), bayes)
    (config,) = report["configs"]  # what load_dataset read: one config, a pattern per split
    assert {entry["split"]: entry["path"] for entry in config["data_files"]} == {
        split: f"data/{split}-*.parquet" for split in sorted(local.splits)
    }


PROBE_SETTINGS = ["--num-probe-tasks", "4", "--rows-per-task", "8", "--positions-per-row", "8"]
PROBE_SETTINGS += ["--distances", "1", "2", "--shuffle-rows", "16", "--num-resamples", "50", "--quiet"]


def analyses(model: str, data: str) -> list[tuple[str, list[str]]]:
    """scripts/probe.py and scripts/figure1.py on one model and corpus: (script, arguments)."""
    return [
        ("scripts/probe.py", ["--model", model, "--data", data, "--out", "probes", *PROBE_SETTINGS]),
        ("scripts/figure1.py", ["--model", model, "--data", data, "--rows", "32", "--out", "fig1"]),
    ]


def test_the_analysis_scripts_give_the_same_numbers_from_repo_ids(hub, published, tmp_path, run_script):
    out = published
    (tmp_path / "local").mkdir()
    for script, arguments in analyses(str(out / "model"), str(out / "corpus")):  # here, from the folders
        done = run_script(script, *arguments, cwd=tmp_path / "local")
        assert done.returncode == 0, done.stderr[-3000:]
    remote = analyses(MODEL, CORPUS)  # both scripts in one fresh client process, by repo id
    source = f"""
        import runpy
        for script, arguments in {remote!r}:
            assert runpy.run_path({str(ROOT)!r} + "/" + script, run_name="script")["main"](arguments) == 0
    """
    checked(run_client(hub, tmp_path / "hub", source))
    local, remote = (
        json.loads((tmp_path / n / "probes" / "probe_results.json").read_text()) for n in ("local", "hub")
    )
    assert remote["records"] == local["records"] and remote["patterns"] == local["patterns"]
    local, remote = (
        json.loads((tmp_path / n / "fig1" / "figure1.json").read_text()) for n in ("local", "hub")
    )
    assert remote == local


def test_a_second_push_is_one_new_commit_and_the_old_revision_still_loads(hub, published, tmp_path):
    out = published
    before = hub.head(f"model:{MODEL}")
    changed = tmp_path / "model"
    shutil.copytree(out / "model", changed)
    model = AutoModelForCausalLM.from_pretrained(changed)
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
    model.save_pretrained(changed)
    checked(run_client_script(hub, tmp_path, "push_to_hub.py", "--model", str(changed), "--repo-id", MODEL))
    commits = json.loads((hub.root / "repos.json").read_text())[f"model:{MODEL}"]["commits"]
    after = hub.head(f"model:{MODEL}")
    assert after != before and commits[after]["parent"] == before
    ids = np.zeros((1, 8), dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    source = f"""
        import json, numpy as np, torch
        from huggingface_hub import HfApi
        from transformers import AutoModelForCausalLM
        ids = torch.as_tensor(np.load("{tmp_path / "ids.npy"}"))
        for name, revision in (("old", "{before}"), ("new", None)):
            lm = AutoModelForCausalLM.from_pretrained("{MODEL}", revision=revision, trust_remote_code=True)
            with torch.no_grad():
                np.save(name + ".npy", lm.eval()(ids).logits.numpy())
        print(json.dumps({{"private": HfApi().model_info("{MODEL}").private}}))
    """
    report = json.loads(checked(run_client(hub, tmp_path / "client", source, plugin=False)).splitlines()[-1])
    assert report["private"] is True  # kept: the second push did not ask for it
    np.testing.assert_array_equal(np.load(tmp_path / "client" / "old.npy"), local_logits(out / "model", ids))
    np.testing.assert_array_equal(np.load(tmp_path / "client" / "new.npy"), local_logits(changed, ids))


def test_a_network_kept_over_training_goes_to_its_steps_branch_and_main_stays(hub, published, tmp_path):
    before = hub.head(f"model:{MODEL}")
    weights = published / "model" / "model.safetensors"
    push = ["--model", str(published / "model"), "--repo-id", MODEL, "--revision", "step-40"]
    checked(run_client_script(hub, tmp_path, "push_to_hub.py", *push))
    record = json.loads((hub.root / "repos.json").read_text())[f"model:{MODEL}"]
    branch = record["commits"][record["refs"]["step-40"]]
    assert record["refs"]["main"] == before and branch["parent"] == before  # made from main, main kept
    assert branch["files"]["model.safetensors"]["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_a_bad_folder_is_refused_before_any_request(hub, published, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(published / "model", broken)
    (broken / "modeling_hmm_roformer.py").unlink()
    seen = len(hub.requests())
    done = run_client_script(hub, tmp_path, "push_to_hub.py", "--model", str(broken), "--repo-id", MODEL)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "lacks the model code" in done.stderr
    assert len(hub.requests()) == seen


@pytest.fixture(scope="module")
def corpus_pushed(reproduced_tiny, tmp_path_factory) -> Path:
    """The state folder of a server that holds the tiny corpus, pushed once by the script."""
    out, _ = reproduced_tiny
    folder = tmp_path_factory.mktemp("pushed")
    healthy = HubServer(folder / "hub")
    try:
        checked(
            run_client_script(
                healthy, folder, "push_to_hub.py", "--dataset", str(out / "corpus"), "--repo-id", CORPUS
            )
        )
    finally:
        healthy.stop()
    return folder / "hub"


@pytest.mark.parametrize("fault", ["commit-500", "die-on-upload"])
def test_a_server_fault_is_one_error_line_and_leaves_the_repo_as_it_was(
    reproduced_tiny, corpus_pushed, tmp_path, fault
):
    out, _ = reproduced_tiny
    root = tmp_path / "hub"
    shutil.copytree(corpus_pushed, root)  # each fault on its own copy of the server's state
    before = stored_head(root, f"dataset:{CORPUS}")
    faulty = HubServer(root, fault=fault)
    try:
        changed = tmp_path / "corpus"
        shutil.copytree(out / "corpus", changed)
        (changed / "extra.npy").write_bytes(os.urandom(2048))  # a new LFS object: it must go up
        done = run_client_script(
            faulty,
            tmp_path,
            "push_to_hub.py",
            "--dataset",
            str(changed),
            "--repo-id",
            CORPUS,
            short_backoff=True,
        )
    finally:
        faulty.stop()
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no new revision was published" in errors[0], done.stderr[-2000:]
    assert stored_head(root, f"dataset:{CORPUS}") == before
    assert not list((root / "blobs").glob("*.partial"))  # no half-written blob either


# ---- the networks kept over training, each on its branch (`--kept-networks`) --------------------
KEPT = "org/hmm-roformer-kept"


@pytest.fixture(scope="module")
def kept_model(tiny_development, tmp_path_factory) -> tuple[Path, dict]:
    """The tiny model of `tiny_development` laid out as a pipeline's model folder: its training
    in training/ (the kept networks in training/development/step-<N>/, the Trainer's checkpoints
    left out) and its development record in development/development.json: (the training folder,
    the record)."""
    record, out = tiny_development
    model = tmp_path_factory.mktemp("kept") / "model"
    skip = shutil.ignore_patterns("checkpoint-*", "runs")
    shutil.copytree(Path(record["source"]).parent, model / "training", ignore=skip)
    (model / "development").mkdir()
    shutil.copy2(out, model / "development" / "development.json")
    return model / "training", record


def kept_folders(training: Path) -> dict[int, Path]:
    from modeling_hmmroformer.experiments.running.folders import kept_networks

    return dict(kept_networks(training / "development"))


@pytest.fixture(scope="module")
def kept_published(hub, kept_model, tmp_path_factory) -> str:
    """The kept model and its networks pushed by the script with --kept-networks: its stdout."""
    training, _ = kept_model
    folder = tmp_path_factory.mktemp("push-kept")
    push = ["--model", str(training), "--repo-id", KEPT, "--kept-networks"]
    return checked(run_client_script(hub, folder, "push_to_hub.py", *push))


def test_every_kept_network_goes_to_its_own_branch_holding_its_files_only(hub, kept_model, kept_published):
    from modeling_hmmroformer.experiments.hub import plan_model_revisions

    training, _ = kept_model
    kept = kept_folders(training)
    record = json.loads((hub.root / "repos.json").read_text())[f"model:{KEPT}"]
    assert sorted(record["refs"]) == sorted(["main", *(f"step-{step}" for step in kept)])
    revisions = plan_model_revisions(training, KEPT)
    assert [r.revision for r in revisions] == ["main", *(f"step-{step}" for step in sorted(kept))]
    for revision in revisions:
        files = record["commits"][record["refs"][revision.revision]]["files"]
        assert sorted(files) == [planned.path_in_repo for planned in revision.plan.files], revision.revision
        for planned in revision.plan.files:
            content = planned.content if planned.content is not None else planned.source.read_bytes()
            assert files[planned.path_in_repo]["sha256"] == hashlib.sha256(content).hexdigest()
        assert f"uploaded {revision.revision}: {hub.url}/{KEPT}/commit/" in kept_published
    main = record["commits"][record["refs"]["main"]]["files"]
    assert "train_results.json" in main and not [path for path in main if path.startswith("development/")]
    for step, folder in kept.items():
        files = record["commits"][record["refs"][f"step-{step}"]]["files"]
        weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        assert files["model.safetensors"]["sha256"] == weights
        assert "train_results.json" not in files  # main's files do not stay on a branch made from it
        assert files["hmm_params.safetensors"]["sha256"] == main["hmm_params.safetensors"]["sha256"]


def test_each_revision_reloads_its_networks_weights_and_its_card_carries_its_place(
    hub, kept_model, kept_published, tmp_path
):
    from modeling_hmmroformer.experiments.analyses.development import development_from_dict

    training, record = kept_model
    kept = {step: str(folder / "model.safetensors") for step, folder in kept_folders(training).items()}
    source = f"""
        import json, torch
        from huggingface_hub import ModelCard, hf_hub_download
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM
        report = {{}}
        for step, weights in {kept!r}.items():
            revision = f"step-{{step}}"
            lm = AutoModelForCausalLM.from_pretrained("{KEPT}", revision=revision, trust_remote_code=True)
            state, saved = lm.state_dict(), load_file(weights)
            card = ModelCard.load(hf_hub_download("{KEPT}", "README.md", revision=revision))
            report[step] = {{
                "class": type(lm).__name__,
                "unknown": sorted(set(saved) - set(state)),
                "equal": all(torch.equal(state[name], tensor) for name, tensor in saved.items() if name in state),
                "results": [[r.dataset_split, r.metric_type, r.metric_name, r.metric_value]
                            for r in card.data.eval_results or []],
                "text": card.text,
            }}
        print(json.dumps(report))
    """
    report = json.loads(checked(run_client(hub, tmp_path, source, plugin=False)).splitlines()[-1])
    places = {network.step: network for network in development_from_dict(record).networks}
    assert sorted(map(int, report)) == sorted(kept) == sorted(places)
    for step, read in report.items():
        assert read["class"] == "HMMRoFormerForCausalLM" and read["equal"] and not read["unknown"], step
        network = places[int(step)]
        results = {(split, name): value for split, _, name, value in read["results"]}
        for split, place in network.splits.items():
            reference = {"mixture": "mixture Bayes", "oracle": "oracle"}[place.reference]
            ours = results[(split, f"KL({reference} || network), nats/token")]
            assert ours == round(place.distances[place.reference], 4)
            best = [
                value for (s, name), value in results.items() if s == split and "best in-context rung" in name
            ]
            assert best == [round(place.best_rung_kl, 4)]
            assert results[(split, "Top-1 accuracy")] == round(place.accuracy, 4)
            assert (
                results[(split, "Nearest learner (a rung of the ladder, retrieval or inference)")]
                == place.label
            )
        gate = results[(None, "Learner on the ladder (infers, retrieves or below the ladder)")]
        assert gate == network.learner
        assert f'revision="step-{step}", trust_remote_code=True)' in read["text"]
        assert f"training step {step}" in read["text"]
    steps = sorted(places)  # the card of each step carries its own numbers, not another step's
    kl = {s: places[s].splits["test"].distances["mixture"] for s in steps}
    assert len({round(value, 4) for value in kl.values()}) == len(steps)


def test_hmm_development_reads_every_step_revision_of_the_repo_in_step_order(
    hub, tiny_development, kept_published, tmp_path
):
    record, out = tiny_development
    arguments = ["--checkpoints", KEPT, "--yardsticks", str(out.parent / "yardsticks"), "--out", "dev.json"]
    checked(run_client_script(hub, tmp_path, "development.py", *arguments, "--quiet"))
    read = json.loads((tmp_path / "dev.json").read_text())
    assert [n["step"] for n in read["networks"]] == [n["step"] for n in record["networks"]]
    assert read["source"] == KEPT
    for hub_network, local in zip(read["networks"], record["networks"], strict=True):
        assert hub_network["tokens"] == local["tokens"] and hub_network["learner"] == local["learner"]
        for split, place in local["splits"].items():
            assert hub_network["splits"][split]["label"] == place["label"]
            assert hub_network["splits"][split]["distances"] == pytest.approx(place["distances"], rel=1e-6)


def test_the_dry_run_lists_every_revision_with_its_sizes(kept_model, capsys):
    from modeling_hmmroformer.experiments.hub import format_revisions, plan_model_revisions

    training, _ = kept_model
    arguments = ["--model", str(training), "--repo-id", KEPT, "--kept-networks", "--dry-run"]
    assert push_script_main(arguments) == 0
    printed = capsys.readouterr().out
    expected = format_revisions(plan_model_revisions(training, KEPT))
    assert printed.strip() == expected + "\ndry run: nothing was uploaded"
    blocks = printed.split("\nrevision ")[1:]  # main, then each kept network in step order
    kept = kept_folders(training)
    assert [block.split(" ")[0].rstrip(":") for block in blocks] == [
        "main",
        *(f"step-{s}" for s in sorted(kept)),
    ]
    for block, (step, folder) in zip(blocks[1:], sorted(kept.items()), strict=True):
        assert block.startswith(f"step-{step} (")
        weights = folder / "model.safetensors"
        line = next(line for line in block.splitlines() if line.strip().startswith("model.safetensors "))
        assert f"{weights.stat().st_size / 1000:.1f} kB" in line and str(weights) in line
        assert "placed (" in block.splitlines()[0] and "README.md" in block
    assert f"{len(kept) + 1} revisions" in printed.splitlines()[-2]


def push_script_main(arguments: list[str]) -> int:
    """`hmm-push-to-hub` in this process: its exit status (an argparse error's too)."""
    from modeling_hmmroformer.experiments.commands import push_to_hub

    try:
        return push_to_hub.main(arguments)
    except SystemExit as stopped:
        return stopped.code


def test_a_card_says_where_no_record_placed_its_network_and_carries_no_number(tiny_development, tmp_path):
    from huggingface_hub import ModelCard

    from modeling_hmmroformer.experiments.hub import plan_model_revisions

    record, out = tiny_development
    run = Path(record["source"]).parent  # its record lies beside run/, where none is looked for

    def cards(**options) -> dict[str, ModelCard]:
        revisions = plan_model_revisions(run, KEPT, **options)[1:]
        return {
            r.revision: ModelCard(
                next(p for p in r.plan.files if p.path_in_repo == "README.md").content.decode()
            )
            for r in revisions
        }

    for revision, card in cards().items():
        assert card.data.eval_results is None and "model-index" not in str(card), revision
        assert "Not placed on the in-context ladder: no development record of the run was found" in card.text
    partial = tmp_path / "development.json"  # a record that placed every step but the last
    partial.write_text(json.dumps({**record, "networks": record["networks"][:-1]}))
    placed = cards(development=partial)
    last = f"step-{record['networks'][-1]['step']}"
    assert placed.pop(last).data.eval_results is None
    assert (
        all(card.data.eval_results for card in placed.values()) and len(placed) == len(record["networks"]) - 1
    )


def drop_the_kept_networks(training: Path) -> None:
    shutil.rmtree(training / "development")


def drop_a_kept_networks_weights(training: Path) -> None:
    (training / "development" / "step-0000023" / "model.safetensors").unlink()


@pytest.mark.parametrize(
    "change, extra, message",
    [
        (drop_the_kept_networks, [], "kept no networks over training"),
        (drop_a_kept_networks_weights, [], "the network kept at step 23 ("),
        (lambda training: None, ["--development", "TRAINING/config.json"], "is not a development record"),
        (lambda training: None, ["--revision", "step-5"], "drop --revision"),
    ],
)
def test_bad_kept_networks_are_one_error_line_before_any_request(
    hub, kept_model, tmp_path, capsys, change, extra, message
):
    training = tmp_path / "model" / "training"
    shutil.copytree(kept_model[0], training)
    change(training)
    extra = [part.replace("TRAINING", str(training)) for part in extra]
    seen = len(hub.requests())
    arguments = ["--model", str(training), "--repo-id", KEPT, "--kept-networks", "--endpoint", hub.url]
    assert push_script_main([*arguments, *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and message in error, error
    assert len(hub.requests()) == seen


def test_a_failed_upload_says_which_revisions_went_up_and_which_did_not(kept_model, tmp_path):
    training, _ = kept_model
    root = tmp_path / "hub"
    healthy = HubServer(root)
    try:  # main first, alone: its blobs are on the server, so the faulty one dies at the first kept network
        checked(
            run_client_script(
                healthy, tmp_path, "push_to_hub.py", "--model", str(training), "--repo-id", KEPT
            )
        )
    finally:
        healthy.stop()
    before = stored_head(root, f"model:{KEPT}")
    faulty = HubServer(root, fault="die-on-upload")
    try:
        push = ["--model", str(training), "--repo-id", KEPT, "--kept-networks"]
        done = run_client_script(faulty, tmp_path, "push_to_hub.py", *push, short_backoff=True)
    finally:
        faulty.stop()
    assert done.returncode == 1, done.stderr[-2000:]
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    steps = sorted(kept_folders(training))
    assert "failed at step-0, which was not published" in error
    assert "went up: main;" in error
    assert f"not sent: {', '.join(f'step-{s}' for s in steps[1:])} (" in error
    state = json.loads((root / "repos.json").read_text())[f"model:{KEPT}"]
    main = state["refs"]["main"]  # went up: unchanged files make no new commit (the client skips it)
    assert main == before or state["commits"][main]["parent"] == before
    weights = hashlib.sha256((training / "model.safetensors").read_bytes()).hexdigest()
    assert state["commits"][main]["files"]["model.safetensors"]["sha256"] == weights
    assert state["refs"].get("step-0", main) == main  # step-0: at most the branch, at main's head
    assert not [name for name in state["refs"] if name not in ("main", "step-0")]
