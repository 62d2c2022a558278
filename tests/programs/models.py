"""Small models written the way users and model libraries write them.

Nothing here knows about primtrace: plain ``nn.Module`` code with today's idioms
(config dataclasses, ``register_buffer``, ``isinstance(x, torch.Tensor)`` checks,
``x.shape[-1] // n_heads``, ``torch.finfo(dtype).min``, ``masked_fill``, ``view`` /
``transpose`` / ``.contiguous()``, in-place updates, ``x.new_zeros``, ``if self.training:``,
dropout, optional arguments defaulting to ``None``, module-level globals read by forward).

Module-level globals read by ``forward`` (the tests rebind them with ``monkeypatch``):

* ``MLP_OUT_SHIFT`` (tensor): added to the MLP's output;
* ``IMAGE_MEAN`` / ``IMAGE_STD`` (tensors): the conv net's input normalization;
* ``RESIDUAL_SCALE`` (number): scales the residual branches of the transformer blocks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

MLP_OUT_SHIFT = torch.zeros(8)
IMAGE_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGE_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
RESIDUAL_SCALE = 1.0


# --- 1. MLP ----------------------------------------------------------------------------------
ACT2CLS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh}


@dataclass
class MLPConfig:
    d_in: int = 16
    d_hidden: int = 64
    d_out: int = 8
    dropout: float = 0.1
    activation: str = "gelu"
    input_noise: float = 0.0  # std of Gaussian noise added to the inputs in training


class MLP(nn.Module):
    def __init__(self, config: MLPConfig):
        super().__init__()
        self.config = config
        self.register_buffer("input_mean", torch.zeros(config.d_in))
        self.fc1 = nn.Linear(config.d_in, config.d_hidden)
        self.act = ACT2CLS[config.activation]()
        self.drop = nn.Dropout(config.dropout)
        self.fc2 = nn.Linear(config.d_hidden, config.d_out)
        self.scale = 1.0

    def forward(self, x, residual=None):
        x = x - self.input_mean
        if self.training and self.config.input_noise > 0:
            x = x + torch.randn_like(x) * self.config.input_noise
        h = self.drop(self.act(self.fc1(x)))
        out = x.new_zeros(x.shape[:-1] + (self.fc2.out_features,))
        out += self.fc2(h)
        out.mul_(self.scale)
        out = out + MLP_OUT_SHIFT
        if isinstance(residual, torch.Tensor):
            out = out + residual
        return out


# --- 2. conv net -----------------------------------------------------------------------------
@dataclass
class ConvNetConfig:
    in_channels: int = 3
    widths: tuple = (8, 16)
    num_classes: int = 10
    dropout: float = 0.1


class ConvNet(nn.Module):
    def __init__(self, config: ConvNetConfig):
        super().__init__()
        c0, (c1, c2) = config.in_channels, config.widths
        self.features = nn.Sequential(
            nn.Conv2d(c0, c1, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(c1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(c2),
            nn.ReLU(inplace=True),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=config.dropout)
        self.fc = nn.Linear(c2, config.num_classes)
        self.temperature = 1.0

    def forward(self, x):
        x = (x - IMAGE_MEAN) / IMAGE_STD
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        return self.fc(x) / self.temperature


# --- 3. GPT block (nanoGPT style, with timm's stochastic depth) ------------------------------
def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """Drop whole residual branches per sample (timm's ``drop_path``)."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)

@dataclass
class GPTConfig:
    block_size: int = 16
    n_embd: int = 32
    n_head: int = 4
    dropout: float = 0.1
    bias: bool = True
    use_sdpa: bool = True
    drop_path: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.use_sdpa = config.use_sdpa
        self.scale = None  # None: 1/sqrt(head_dim)
        if not self.use_sdpa:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        head_dim = x.shape[-1] // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, head_dim).transpose(1, 2)
        q = q.view(B, T, self.n_head, head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, head_dim).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0,
                is_causal=True, scale=self.scale)
        else:
            scale = self.scale if self.scale is not None else 1.0 / math.sqrt(k.size(-1))
            att = (q @ k.transpose(-2, -1)) * scale
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPTMLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class GPTBlock(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = GPTMLP(config)
        self.drop_path = DropPath(config.drop_path) if config.drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        x = x + RESIDUAL_SCALE * self.drop_path(self.attn(self.ln_1(x)))
        x = x + RESIDUAL_SCALE * self.drop_path(self.mlp(self.ln_2(x)))
        return x


# --- 4. LLaMA block (HF style) ---------------------------------------------------------------
@dataclass
class LlamaConfig:
    hidden_size: int = 32
    intermediate_size: int = 64
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 32
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    attention_dropout: float = 0.1


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=32, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        t = torch.arange(max_position_embeddings, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, position_ids):
        cos = self.cos_cached[position_ids].to(dtype=x.dtype)
        sin = self.sin_cached[position_ids].to(dtype=x.dtype)
        return cos, sin


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = F.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)  # gate
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)  # up
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def causal_mask(seq_len, dtype, device):
    mask = torch.full((seq_len, seq_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    return torch.triu(mask, diagonal=1)[None, None, :, :]


class LlamaBlock(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        head_dim = config.hidden_size // config.num_attention_heads
        self.rotary_emb = LlamaRotaryEmbedding(head_dim, config.max_position_embeddings, config.rope_theta)

    def forward(self, hidden_states, position_ids=None):
        batch, seq_len = hidden_states.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=hidden_states.device).unsqueeze(0).expand(batch, -1)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        mask = causal_mask(seq_len, hidden_states.dtype, hidden_states.device)

        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask=mask)
        hidden_states = residual + RESIDUAL_SCALE * hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + RESIDUAL_SCALE * hidden_states


# --- 5. BERT encoder layer with a padding mask -----------------------------------------------
@dataclass
class BertConfig:
    vocab_size: int = 50
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 32
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    attention: str = "manual"  # or "torch" (nn.MultiheadAttention)


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False)
        self.embed_scale = 1.0

    def forward(self, input_ids, token_type_ids=None):
        seq_length = input_ids.shape[1]
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            buffered_token_type_ids = self.token_type_ids[:, :seq_length]
            token_type_ids = buffered_token_type_ids.expand(input_ids.shape[0], seq_length)
        embeddings = self.word_embeddings(input_ids) * self.embed_scale
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


def get_extended_attention_mask(attention_mask, dtype):
    """(B, T) padding mask (True/1 = token, False/0 = padding) -> additive (B, 1, 1, T) mask."""
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.bool:
        keep = attention_mask
    else:
        keep = torch.as_tensor(attention_mask) != 0
    extended = keep[:, None, None, :].to(dtype=dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.use_torch_mha = config.attention == "torch"
        h = config.hidden_size
        if self.use_torch_mha:
            self.attention = nn.MultiheadAttention(
                h, config.num_attention_heads, dropout=config.attention_probs_dropout_prob, batch_first=True)
        else:
            self.attention = BertSelfAttention(config)
            self.attention_output = nn.Linear(h, h)
        self.attention_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attention_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(h, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, h)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.output_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, hidden_states, padding_mask=None):
        if self.use_torch_mha:
            key_padding_mask = None if padding_mask is None else ~padding_mask
            attn, _ = self.attention(hidden_states, hidden_states, hidden_states,
                                     key_padding_mask=key_padding_mask, need_weights=False)
        else:
            extended = None
            if padding_mask is not None:
                extended = get_extended_attention_mask(padding_mask, hidden_states.dtype)
            attn = self.attention_output(self.attention(hidden_states, extended))
        attn = self.attention_dropout(attn)
        hidden_states = self.attention_norm(hidden_states + RESIDUAL_SCALE * attn)
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        ffn = self.output_dropout(ffn)
        return self.output_norm(hidden_states + RESIDUAL_SCALE * ffn)


class BertEncoder(nn.Module):
    """Embeddings and one encoder layer; inputs are token ids and a bool padding mask."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = BertLayer(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = input_ids.new_ones(input_ids.shape, dtype=torch.bool)
        hidden_states = self.embeddings(input_ids, token_type_ids=token_type_ids)
        hidden_states = self.layer(hidden_states, attention_mask)
        # zero the padding positions, as pooling code downstream expects
        return hidden_states.masked_fill(~attention_mask[..., None], 0.0)


# --- library-style functions -----------------------------------------------------------------
# a training step reading a global model and optimizer (set by the caller)
MODEL: nn.Module | None = None
OPTIMIZER: torch.optim.Optimizer | None = None


def forward_loss(x, target):
    return F.mse_loss(MODEL(x), target)


def train_step(x, target):
    OPTIMIZER.zero_grad()
    loss = forward_loss(x, target)
    loss.backward()
    OPTIMIZER.step()
    return loss.detach()


def ema_update_(ema, value, decay=0.9, step=None):
    """ema <- decay * ema + (1 - decay) * value, in place; ``decay`` a number or a tensor;
    ``step`` (an int tensor) counts updates, in place, when given."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, dtype=ema.dtype)
    if torch.is_tensor(decay):
        decay = decay.to(ema.dtype)
        ema.mul_(decay).add_(value * (1 - decay))
    else:
        ema.mul_(decay).add_(value, alpha=1 - decay)
    if step is not None:
        step.add_(1)
    return ema


def scaled_residual(x, residual=None, alpha=1.0):
    """x + alpha * residual when residual is a tensor; a number residual is a constant shift."""
    if isinstance(residual, torch.Tensor):
        return x + alpha * residual
    if residual is not None:
        return x + residual
    return x


@dataclass
class PreprocessConfig:
    clip: float = 3.0
    scale: float = 0.5
    activation: str = "tanh"
    center: bool = True


CONFIG = PreprocessConfig()


def preprocess(x):
    if CONFIG.center:
        x = x - x.mean(dim=-1, keepdim=True)
    x = x.clamp(-CONFIG.clip, CONFIG.clip) * CONFIG.scale
    if CONFIG.activation == "tanh":
        return torch.tanh(x)
    return F.relu(x)
