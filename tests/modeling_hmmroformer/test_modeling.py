"""HMMRoFormer: equivalences that would catch real bugs, loading from saved folders, bad input."""

import json

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

import hmm_datasets
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM, HMMRoFormerModel
from modeling_hmmroformer.corpus import check_model_fits_corpus, config_for_corpus

VOCAB = 7


def make_model(seed=0, **overrides) -> HMMRoFormerForCausalLM:
    torch.manual_seed(seed)
    config = HMMRoFormerConfig.from_preset("tiny", vocab_size=VOCAB, **overrides)
    return HMMRoFormerForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def input_ids():
    return torch.randint(0, VOCAB, (3, 24), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def saved(model, tmp_path_factory, input_ids):
    folder = tmp_path_factory.mktemp("checkpoint") / "tiny-model"
    model.save_pretrained(folder)
    with torch.no_grad():
        torch.save({"input_ids": input_ids, "logits": model(input_ids).logits}, folder / "reference.pt")
    return folder


def test_saved_folder_carries_its_code_and_an_auto_map_for_both_auto_classes(saved):
    assert (saved / "modeling_hmm_roformer.py").exists() and (
        saved / "configuration_hmm_roformer.py"
    ).exists()
    config = json.loads((saved / "config.json").read_text())
    assert config["model_type"] == "hmm_roformer"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_hmm_roformer.HMMRoFormerConfig",
        "AutoModel": "modeling_hmm_roformer.HMMRoFormerModel",
        "AutoModelForCausalLM": "modeling_hmm_roformer.HMMRoFormerForCausalLM",
    }


def test_the_travelling_files_import_only_torch_transformers_and_each_other(saved):
    allowed = {"torch", "transformers", "huggingface_hub", "collections", "dataclasses", "."}
    for name in ("modeling_hmm_roformer.py", "configuration_hmm_roformer.py"):
        for line in (saved / name).read_text().splitlines():
            if line.startswith(("import ", "from ")):
                module = line.split()[1]
                root = "." if module.startswith(".") else module.split(".")[0]
                assert root in allowed, f"{name} imports {module}"


def test_remote_code_loads_in_a_fresh_process_without_the_plugin(saved, run_without_plugin):
    stdout = run_without_plugin(
        f"""
        import torch
        from transformers import AutoModel, AutoModelForCausalLM
        reference = torch.load({str(saved / "reference.pt")!r})
        lm = AutoModelForCausalLM.from_pretrained({str(saved)!r}, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained({str(saved)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            logits = lm(reference["input_ids"]).logits
            hidden = base(reference["input_ids"]).last_hidden_state
        assert "transformers_modules" in type(lm).__module__, type(lm).__module__
        assert type(base).__name__ == "HMMRoFormerModel"
        assert torch.equal(logits, reference["logits"]), (logits - reference["logits"]).abs().max()
        assert torch.allclose(lm.lm_head(hidden), reference["logits"], atol=1e-6)
        print("ok")
        """
    )
    assert stdout.strip().endswith("ok")


def test_with_the_plugin_installed_no_remote_code_is_needed(saved, model, input_ids):
    loaded = AutoModelForCausalLM.from_pretrained(saved).eval()
    assert type(loaded) is HMMRoFormerForCausalLM
    assert type(AutoModel.from_pretrained(saved)) is HMMRoFormerModel
    assert isinstance(AutoConfig.from_pretrained(saved), HMMRoFormerConfig)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, model(input_ids).logits, atol=0, rtol=0)
    # the rotary frequencies are a non-persistent buffer: rebuilt after loading from the meta device
    expected = loaded.model.rotary_emb.compute_inv_freq(loaded.config)
    torch.testing.assert_close(loaded.model.rotary_emb.inv_freq, expected, atol=0, rtol=0)


@pytest.mark.parametrize("norm_placement", ["post", "pre"])
def test_eager_and_sdpa_agree(norm_placement, input_ids):
    model = make_model(norm_placement=norm_placement)
    with torch.no_grad():
        model.set_attn_implementation("eager")
        eager = model(input_ids).logits
        model.set_attn_implementation("sdpa")
        sdpa = model(input_ids).logits
    torch.testing.assert_close(sdpa, eager, atol=1e-5, rtol=0)


def test_flex_attention_agrees_with_sdpa(input_ids):
    model = make_model()
    with torch.no_grad():
        sdpa = model(input_ids).logits
        model.set_attn_implementation("flex_attention")
        try:
            flex = model(input_ids).logits
        except Exception as error:  # flex needs a compiler toolchain on some CPUs
            pytest.skip(f"flex_attention unavailable here: {type(error).__name__}: {error}")
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=0)


def test_changing_a_later_token_leaves_earlier_logits_unchanged(model, input_ids):
    changed = input_ids.clone()
    changed[:, 15] = (changed[:, 15] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(input_ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :15], b[:, :15], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 15:], b[:, 15:])


def test_rotary_attention_depends_only_on_relative_positions(model, input_ids):
    positions = torch.arange(input_ids.shape[1])[None].expand(3, -1)
    with torch.no_grad():
        base = model(input_ids, position_ids=positions, output_attention_logits=True)
        shifted = model(input_ids, position_ids=positions + 100, output_attention_logits=True)
        moved = model(input_ids, position_ids=positions * 2, output_attention_logits=True)
    for a, b in zip(base.attention_logits, shifted.attention_logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(base.logits, shifted.logits, atol=1e-4, rtol=1e-4)
    # position_ids are honoured: stretching the distances changes the attention
    assert not torch.allclose(base.attention_logits[0], moved.attention_logits[0], atol=1e-3)


def test_without_position_embeddings_positions_do_not_matter(input_ids):
    model = make_model(position_embedding="none")
    positions = torch.arange(input_ids.shape[1])[None].expand(3, -1)
    with torch.no_grad():
        a = model(input_ids, position_ids=positions, output_attention_logits=True).attention_logits
        b = model(
            input_ids, position_ids=positions.flip(-1) * 3, output_attention_logits=True
        ).attention_logits
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=0, rtol=0)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_recorded_outputs_are_complete_and_consistent(implementation, input_ids):
    model = make_model()
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        out = model(
            input_ids, output_attentions=True, output_attention_logits=True, output_hidden_states=True
        )
        plain = model(input_ids)
    layers, heads, seq = model.config.num_hidden_layers, model.config.num_attention_heads, input_ids.shape[1]
    assert len(out.hidden_states) == layers + 1 and len(out.attentions) == len(out.attention_logits) == layers
    for weights, logits in zip(out.attentions, out.attention_logits):
        assert weights.shape == logits.shape == (3, heads, seq, seq)
        torch.testing.assert_close(logits.softmax(-1), weights, atol=1e-6, rtol=0)
        assert torch.all(weights.triu(1) == 0)  # causal
    torch.testing.assert_close(out.logits, plain.logits, atol=1e-5, rtol=0)
    assert plain.attention_logits is None and plain.attentions is None


def test_attention_logits_can_be_asked_for_in_the_config(input_ids):
    model = make_model(output_attention_logits=True)
    with torch.no_grad():
        out = model(input_ids)
    assert len(out.attention_logits) == model.config.num_hidden_layers


def test_generate_continues_a_prompt(model, input_ids):
    with torch.no_grad():
        generated = model.generate(input_ids[:, :10], max_new_tokens=6, do_sample=False)
        # greedy decoding with the cache equals the argmax of a full forward pass
        full = model(generated).logits
    assert generated.shape == (3, 16)
    torch.testing.assert_close(full[:, 9:-1].argmax(-1), generated[:, 10:])


def test_activation_checkpointing_gives_the_same_gradients(input_ids):
    grads = []
    for checkpointing in (False, True):
        model = make_model().train()
        if checkpointing:
            model.activation_checkpointing_enable()
        model(input_ids, labels=input_ids).loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_loss_accepts_trainers_token_count(model, input_ids):
    labels = input_ids.clone()
    labels[:, :5] = -100
    with torch.no_grad():
        mean = model(input_ids, labels=labels).loss
        summed = model(input_ids, labels=labels, num_items_in_batch=torch.tensor(10)).loss
    counted = (labels[:, 1:] != -100).sum()
    torch.testing.assert_close(summed, mean * counted / 10)


def test_bf16_forward_runs_on_cpu(input_ids):
    model = make_model().to(torch.bfloat16)
    with torch.no_grad():
        logits = model(input_ids).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def test_dropout_is_active_only_in_training(input_ids):
    model = make_model(hidden_dropout_prob=0.5, attention_dropout=0.5)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, model(input_ids).logits)
        model.train()
        assert not torch.allclose(model(input_ids).logits, model(input_ids).logits)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"hidden_size": 30, "num_attention_heads": 4},
            "hidden_size=30 is not divisible by num_attention_heads=4",
        ),
        ({"hidden_size": 30, "num_attention_heads": 10}, "head dimension .* = 3 is odd"),
        ({"norm_placement": "middle"}, "norm_placement='middle' must be one of"),
        ({"hidden_act": "wobble"}, "hidden_act='wobble' is not a known activation"),
        ({"num_hidden_layers": 0}, "num_hidden_layers=0 must be a positive integer"),
        ({"attention_dropout": 1.5}, r"attention_dropout=1.5 must lie in \[0, 1\)"),
    ],
)
def test_bad_configs_name_the_values(overrides, message):
    with pytest.raises(StrictDataclassError, match=message):
        HMMRoFormerConfig.from_preset("tiny", **overrides)
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        HMMRoFormerConfig.from_preset("huge")


def test_out_of_range_tokens_and_overlong_sequences_are_refused(model):
    with pytest.raises(ValueError, match=r"input_ids range over 0..9, but the model's vocabulary is 0..6"):
        model(torch.tensor([[0, 9, 1]]))
    with pytest.raises(ValueError, match="input_ids range over -1"):
        model(torch.tensor([[0, -1, 1]]))
    limit = model.config.max_position_embeddings
    with pytest.raises(ValueError, match=f"needs {limit + 1} positions but max_position_embeddings={limit}"):
        model(torch.zeros(1, limit + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.zeros(1, 4, dtype=torch.long), position_ids=torch.tensor([[0, 1, 2, limit]]))


def test_model_configs_fit_corpora_or_say_why_not():
    corpus = hmm_datasets.get_preset("paper")
    config = config_for_corpus(corpus, "paper")
    assert (config.vocab_size, config.num_hidden_layers, config.hidden_size) == (17, 16, 1024)
    assert config.max_position_embeddings >= corpus.sequence_length
    small_vocab = HMMRoFormerConfig.from_preset("tiny", vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size=10 is smaller than the corpus's 17 tokens"):
        check_model_fits_corpus(small_vocab, corpus)
    with pytest.raises(
        ValueError, match="max_position_embeddings=256 is shorter than the corpus rows \\(400"
    ):
        check_model_fits_corpus(HMMRoFormerConfig.from_preset("tiny", vocab_size=17), corpus)
