"""HMMRoFormer: equivalences that would catch real bugs, loading from saved folders, bad input."""

import json
import os
import subprocess
import sys

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import hmm_datasets
from hmm_datasets.corpus import check_model_fits_corpus
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM, HMMRoFormerModel
from modeling_hmmroformer.experiments.settings import config_for_corpus
from probing.recording import recording_attention

TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model

VOCAB = 7


def make_model(seed=0, **overrides) -> HMMRoFormerForCausalLM:
    torch.manual_seed(seed)
    config = HMMRoFormerConfig(**TINY_SIZES, vocab_size=VOCAB, **overrides)
    return HMMRoFormerForCausalLM(config).eval()


def attention_logits(model, input_ids, **kwargs) -> list[torch.Tensor]:
    """Each layer's pre-softmax attention logits of one forward pass (`probing.recording`)."""
    with torch.no_grad(), recording_attention(model) as records:
        model(input_ids, **kwargs)
    return [record.logits for record in records]


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
    expected, _ = loaded.model.rotary_emb.compute_default_rope_parameters(loaded.config)
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


def test_flex_attention_is_refused_on_cpu_before_any_attention_runs(input_ids, monkeypatch):
    model = make_model()
    model.set_attn_implementation("flex_attention")

    def never(*args, **kwargs):
        raise AssertionError("flex_attention ran on CPU")

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "flex_attention", never)
    message = r"flex_attention.* refused on CPU.* wrong values or NaN.* no backward.*set_attn_implementation\('sdpa'\) \(or 'eager'\)"
    with torch.no_grad():
        with pytest.raises(ValueError, match=message):
            model(input_ids)
        with pytest.raises(ValueError, match=message):
            model.model(inputs_embeds=model.model.embed_tokens(input_ids))
        with pytest.raises(ValueError, match=message):
            model.generate(input_ids[:, :4], max_new_tokens=2, do_sample=False)
        with pytest.raises(ValueError, match=message):  # also when the call asks for the weights
            model(input_ids, output_attentions=True)
        model.set_attn_implementation("sdpa")  # what the message says to do works
        assert model(input_ids).logits.shape == (*input_ids.shape, VOCAB)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="flex_attention is refused on CPU (wrong values/NaN from torch's AVX2 kernel, no backward); "
    "its agreement with sdpa is checked on CUDA",
)
@pytest.mark.parametrize("padded", [False, True])
def test_flex_attention_agrees_with_sdpa_on_cuda(padded, input_ids):
    model = make_model().cuda()
    input_ids = input_ids.cuda()
    attention_mask = torch.ones_like(input_ids)
    if padded:
        attention_mask[1, :5] = 0
    with torch.no_grad():
        sdpa = model(input_ids, attention_mask=attention_mask).logits
        model.set_attn_implementation("flex_attention")
        flex = model(input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    torch.testing.assert_close(flex[real], sdpa[real], atol=1e-4, rtol=0)


def test_changing_a_later_token_leaves_earlier_logits_unchanged(model, input_ids):
    changed = input_ids.clone()
    changed[:, 15] = (changed[:, 15] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(input_ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :15], b[:, :15], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 15:], b[:, 15:])


def test_rotary_attention_depends_only_on_relative_positions(model, input_ids):
    positions = torch.arange(input_ids.shape[1])[None].expand(3, -1)
    base = attention_logits(model, input_ids, position_ids=positions)
    shifted = attention_logits(model, input_ids, position_ids=positions + 100)
    moved = attention_logits(model, input_ids, position_ids=positions * 2)
    for a, b in zip(base, shifted):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids, position_ids=positions).logits,
            model(input_ids, position_ids=positions + 100).logits,
            atol=1e-4,
            rtol=1e-4,
        )
    # position_ids are honoured: stretching the distances changes the attention
    assert not torch.allclose(base[0], moved[0], atol=1e-3)


def test_without_position_embeddings_positions_do_not_matter(input_ids):
    model = make_model(position_embedding="none")
    positions = torch.arange(input_ids.shape[1])[None].expand(3, -1)
    a = attention_logits(model, input_ids, position_ids=positions)
    b = attention_logits(model, input_ids, position_ids=positions.flip(-1) * 3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=0, rtol=0)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_recorded_outputs_are_complete_and_consistent(implementation, input_ids):
    model = make_model()
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        out = model(input_ids, output_attentions=True, output_hidden_states=True)
        plain = model(input_ids)
    logits_per_layer = attention_logits(model, input_ids)
    layers, heads, seq = model.config.num_hidden_layers, model.config.num_attention_heads, input_ids.shape[1]
    assert len(out.hidden_states) == layers + 1 and len(out.attentions) == len(logits_per_layer) == layers
    for weights, logits in zip(out.attentions, logits_per_layer):
        assert weights.shape == logits.shape == (3, heads, seq, seq)
        torch.testing.assert_close(logits.softmax(-1), weights, atol=1e-6, rtol=0)
        assert torch.all(weights.triu(1) == 0)  # causal
    torch.testing.assert_close(out.logits, plain.logits, atol=1e-5, rtol=0)
    assert plain.attentions is None and model.config._attn_implementation == implementation


CPU_IMPLEMENTATIONS = ["eager", "sdpa"]  # flex_attention is refused on CPU
RECORDING = {"plain": {}, "recording": {"output_attentions": True}}  # weights asked for: eager attention


@pytest.mark.parametrize("recording", RECORDING)
@pytest.mark.parametrize("implementation", CPU_IMPLEMENTATIONS)
def test_a_left_padded_row_gives_the_unpadded_rows_logits(implementation, recording):
    model = make_model()
    model.set_attn_implementation(implementation)
    full, short = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(3))
    short, pad = short[:18], 6
    input_ids = torch.stack([full, torch.cat([torch.full((pad,), VOCAB - 1), short])])
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # as generate() builds them
    with torch.no_grad():
        batch = model(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, **RECORDING[recording]
        )
        alone = model(short[None], **RECORDING[recording])
        unpadded_full = model(full[None]).logits
    torch.testing.assert_close(batch.logits[1, pad:], alone.logits[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(batch.logits[0], unpadded_full[0], atol=1e-5, rtol=0)
    if recording == "recording":
        for weights, alone_weights in zip(batch.attentions, alone.attentions):
            torch.testing.assert_close(weights[1, :, pad:, pad:], alone_weights[0], atol=1e-5, rtol=0)
            assert torch.all(weights[1, :, pad:, :pad] == 0)  # real tokens never look at the padding


def shared_prefix_mask(dtype: torch.dtype) -> torch.Tensor:
    """`[1, 1, 6, 6]`: a 3-token prefix, then 3 tokens that each see the prefix and themselves only."""
    allowed = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0, 0],
            [1, 1, 1, 0, 1, 0],
            [1, 1, 1, 0, 0, 1],
        ]
    ).bool()[None, None]
    if dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool], ids=["additive", "boolean"])
@pytest.mark.parametrize("recording", RECORDING)
@pytest.mark.parametrize("implementation", CPU_IMPLEMENTATIONS)
def test_a_custom_4d_mask_is_honoured(implementation, recording, mask_dtype):
    """Three continuations of one prefix, packed in one row, equal the three rows run apart."""
    model = make_model()
    model.set_attn_implementation(implementation)
    prefix, ends = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    apart = torch.stack([torch.cat([prefix, end[None]]) for end in ends])  # [3, 4]
    packed = torch.cat([prefix, ends])[None]  # [1, 6]
    with torch.no_grad():
        separate = model(apart, **RECORDING[recording])
        shared = model(
            packed,
            attention_mask=shared_prefix_mask(mask_dtype),
            position_ids=torch.tensor([[0, 1, 2, 3, 3, 3]]),
            **RECORDING[recording],
        )
    torch.testing.assert_close(shared.logits[0, 3:], separate.logits[:, 3], atol=1e-5, rtol=0)
    torch.testing.assert_close(shared.logits[0, :3], separate.logits[0, :3], atol=1e-5, rtol=0)
    if recording == "recording":
        for weights in shared.attentions:
            assert torch.all(weights[0, :, ~shared_prefix_mask(torch.bool)[0, 0]] == 0)


@pytest.mark.parametrize("implementation", CPU_IMPLEMENTATIONS)
def test_sequences_packed_by_position_ids_are_masked_alike_when_recording(implementation):
    """Without a cache or a mask, positions that restart mark packed sequences (as in Llama)."""
    model = make_model()
    model.set_attn_implementation(implementation)
    a, b = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(4))
    packed, positions = torch.cat([a, b])[None], torch.arange(8).repeat(2)[None]
    with torch.no_grad():
        plain = model(packed, position_ids=positions, use_cache=False).logits
        recorded = model(packed, position_ids=positions, use_cache=False, output_attentions=True)
        second = model(b[None]).logits
    torch.testing.assert_close(plain[0, 8:], second[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(recorded.logits, plain, atol=1e-5, rtol=0)
    for weights in recorded.attentions:  # nothing of the first sequence is seen from the second
        assert torch.all(weights[0, :, 8:, :8] == 0)


def test_generate_continues_a_prompt(model, input_ids):
    with torch.no_grad():
        generated = model.generate(input_ids[:, :10], max_new_tokens=6, do_sample=False)
        # greedy decoding with the cache equals the argmax of a full forward pass
        full = model(generated).logits
    assert generated.shape == (3, 16)
    torch.testing.assert_close(full[:, 9:-1].argmax(-1), generated[:, 10:])


def test_greedy_generate_equals_appending_the_argmax_step_by_step(model, input_ids):
    with torch.no_grad():
        generated = model.generate(input_ids[:, :10], max_new_tokens=6, do_sample=False)
        tokens = input_ids[:, :10]
        for _ in range(6):  # no cache: a full forward pass per step
            next_token = model(tokens, use_cache=False).logits[:, -1].argmax(-1)
            tokens = torch.cat([tokens, next_token[:, None]], dim=-1)
    torch.testing.assert_close(generated, tokens, atol=0, rtol=0)


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


@pytest.mark.parametrize("implementation", CPU_IMPLEMENTATIONS)
def test_bf16_forward_on_cpu_agrees_with_fp32(implementation, input_ids):
    model = make_model()
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        fp32 = model(input_ids).logits
        bf16 = model.to(torch.bfloat16)(input_ids).logits
    assert bf16.dtype == torch.bfloat16
    # bf16 keeps 8 bits of mantissa: here 2e-3 on logits up to 0.8, and the same argmax almost everywhere
    torch.testing.assert_close(bf16.float(), fp32, atol=0.02, rtol=0)
    assert (bf16.argmax(-1) == fp32.argmax(-1)).float().mean() > 0.9


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
        ({"rope_theta": -1.0}, r"rope_parameters\['rope_theta'\]=-1.0 must be > 0"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 0.0}}, r"'rope_theta'\]=0.0 must be > 0"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps=0.0 must be > 0"),
    ],
)
def test_bad_configs_name_the_values(overrides, message):
    with pytest.raises(StrictDataclassError, match=message):
        HMMRoFormerConfig(**{**TINY_SIZES, **overrides})


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


def test_off_the_cpu_the_checks_read_no_tensor_values():
    """A meta tensor has no values, so any host read of one (`int()`, `.item()`, `bool()`) raises: a
    forward pass on the meta device shows that no check would synchronise an accelerator."""
    model = make_model().to("meta")
    out_of_range_ids = torch.full((2, 5), VOCAB + 3, device="meta")
    far_positions = torch.full((2, 5), 10**6, device="meta")
    with torch.no_grad():
        for recording in RECORDING.values():
            out = model(out_of_range_ids, position_ids=far_positions, **recording)
            assert out.logits.shape == (2, 5, VOCAB) and out.logits.device.type == "meta"
        limit = model.config.max_position_embeddings  # the length is a host integer: checked everywhere
        with pytest.raises(ValueError, match=f"needs {limit + 1} positions"):
            model(torch.zeros(1, limit + 1, dtype=torch.long, device="meta"))


def test_configs_saved_with_a_bare_rope_theta_load_into_rope_parameters(tmp_path, input_ids):
    model = make_model(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["rope_parameters"] == {"rope_type": "default", "rope_theta": 500.0}
    del saved["rope_parameters"]
    saved["rope_theta"] = 500.0  # the form written before transformers v5
    (tmp_path / "config.json").write_text(json.dumps(saved))

    dim = model.config.head_dim
    expected = 1.0 / 500.0 ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    for config in (HMMRoFormerConfig.from_dict(saved), AutoConfig.from_pretrained(tmp_path)):
        assert config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0}
        assert "rope_theta" not in config.to_dict()
        torch.testing.assert_close(HMMRoFormerModel(config).rotary_emb.inv_freq, expected, atol=0, rtol=0)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded.model.rotary_emb.inv_freq, expected, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, model(input_ids).logits, atol=0, rtol=0)


def test_scaled_rope_types_work_as_in_llama(input_ids):
    """Linear scaling by 2 at positions 2p is the default rotary embedding at positions p."""
    model = make_model()
    scaled = make_model(rope_parameters={"rope_type": "linear", "factor": 2.0})
    scaled.load_state_dict(model.state_dict())
    positions = torch.arange(input_ids.shape[1])[None]
    with torch.no_grad():
        torch.testing.assert_close(
            scaled(input_ids, position_ids=2 * positions).logits,
            model(input_ids, position_ids=positions).logits,
            atol=1e-5,
            rtol=0,
        )
    base = attention_logits(model, input_ids, position_ids=positions)
    same = attention_logits(scaled, input_ids, position_ids=2 * positions)
    closer = attention_logits(scaled, input_ids, position_ids=positions)
    torch.testing.assert_close(same[0], base[0], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(closer[0], base[0], atol=1e-3)


DISTRIBUTED_WORKER = """
import json, os, sys
import torch
import modeling_hmmroformer  # registers the Auto classes
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

for folder, size_name in zip(sys.argv[1::2], sys.argv[2::2]):  # each case's checkpoint, and its plan
    reference = torch.load(os.path.join(folder, "reference.pt"))
    config = DistributedConfig(**{size_name: int(os.environ["WORLD_SIZE"])})
    model = AutoModelForCausalLM.from_pretrained(folder, distributed_config=config).eval()
    with torch.no_grad():
        logits = model(reference["input_ids"]).logits
    layers = [i for i, layer in enumerate(model.model.layers) if hasattr(layer, "self_attn")]
    first = model.model.layers[layers[0]]
    parts = (first.self_attn.qkv_proj, first.mlp.up_proj)
    rows = [getattr(m.weight, "to_local", lambda: m.weight)().shape[0] for m in parts]
    difference = (logits - reference["logits"]).abs().max().item()
    result = {"rank": int(os.environ["RANK"]), "layers": layers, "rows": rows, "difference": difference}
    with open(os.path.join(folder, f"rank{os.environ['RANK']}.json"), "w") as file:
        json.dump(result, file)
torch.distributed.destroy_process_group()  # left to the exit, gloo's threads can abort the process
"""
PARALLEL_CASES = [("tp_size", "post"), ("pp_size", "post"), ("pp_size", "pre")]


def test_tensor_and_pipeline_parallel_logits_equal_one_process(tmp_path):
    """Two CPU processes (gloo) load checkpoints with transformers' plans and give their logits:
    tensor parallel, and pipeline parallel with both norm placements, in one launch."""
    arguments, models = [], {}
    for size_name, norm_placement in PARALLEL_CASES:
        model = make_model(norm_placement=norm_placement)
        with torch.no_grad():  # LayerNorms away from their (1, 0) start, so that applying one twice shows
            for name, parameter in model.named_parameters():
                if "norm" in name:
                    parameter.add_(0.5 * torch.randn_like(parameter))
        input_ids = torch.randint(0, VOCAB, (3, 24), generator=torch.Generator().manual_seed(1))
        folder = tmp_path / f"{size_name}-{norm_placement}"
        model.save_pretrained(folder)
        with torch.no_grad():
            torch.save({"input_ids": input_ids, "logits": model(input_ids).logits}, folder / "reference.pt")
        arguments += [str(folder), size_name]
        models[folder] = (size_name, model.config)
    (tmp_path / "worker.py").write_text(DISTRIBUTED_WORKER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*command, str(tmp_path / "worker.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for folder, (size_name, config) in models.items():
        ranks = [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]
        qkv_rows, up_rows = 3 * config.hidden_size, config.intermediate_size
        for rank in ranks:
            if size_name == "tp_size":  # every rank runs every layer on half of each weight
                assert rank["layers"] == [0, 1] and rank["rows"] == [qkv_rows // 2, up_rows // 2], folder.name
            else:  # one layer per rank, whole weights
                assert rank["layers"] == [rank["rank"]] and rank["rows"] == [qkv_rows, up_rows], folder.name
            assert rank["difference"] < 1e-5, (folder.name, rank)


def test_model_configs_fit_corpora_or_say_why_not():
    corpus = hmm_datasets.get_preset("paper")
    config = config_for_corpus(corpus, hidden_size=1024, num_hidden_layers=16, num_attention_heads=16)
    assert (config.vocab_size, config.num_hidden_layers, config.hidden_size) == (17, 16, 1024)
    assert config.max_position_embeddings >= corpus.sequence_length
    small_vocab = HMMRoFormerConfig(**TINY_SIZES, vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size=10 is smaller than the corpus's 17 tokens"):
        check_model_fits_corpus(small_vocab, corpus)
    with pytest.raises(
        ValueError, match="max_position_embeddings=256 is shorter than the corpus rows \\(400"
    ):
        check_model_fits_corpus(
            HMMRoFormerConfig(**TINY_SIZES, vocab_size=17, max_position_embeddings=256), corpus
        )
