// The gateway's OpenAI-compatible HTTP front, driven by the official `openai`
// Node package exactly as a user's program would: completions and chat,
// streaming and not, logprobs, usage, and an error. Starts `tandem up` on
// stories260K with ephemeral ports and stops it at the end.
//
//   node --test openai_sdk_test.mjs   (TANDEM_BIN and TANDEM_MODEL set)
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const bin = process.env.TANDEM_BIN;
const model = process.env.TANDEM_MODEL;
// The stories260K model's README: greedy decoding of "Once upon a time".
const GREEDY = ', there was a little girl named Lily. She loved to play outside in the park.';

let up;
let client;

before(async () => {
  assert.ok(bin && model, 'TANDEM_BIN and TANDEM_MODEL must be set');
  up = spawn(bin, ['up', '--model', model, '--port', '0', '--http-port', '0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const http = await new Promise((resolve, reject) => {
    up.once('exit', (code) => reject(new Error(`tandem up exited with ${code}`)));
    const lines = createInterface({ input: up.stdout });
    lines.on('line', (line) => {
      const m = line.match(/^READY .*\bhttp=(\S+)/);
      if (m) resolve(m[1]);
    });
  });
  client = new OpenAI({ baseURL: `http://${http}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (!up || up.exitCode !== null) return;
  const exited = new Promise((resolve) => up.once('exit', resolve));
  up.kill('SIGTERM');
  await exited;
});

test('models lists the served model with its context', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'stories260K');
  assert.equal(models.data[0].max_model_len, 2048);
});

test('completion, greedy, with logprobs and usage', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, temperature: 0, logprobs: 3,
  });
  assert.equal(r.object, 'text_completion');
  assert.ok(GREEDY.startsWith(r.choices[0].text), r.choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.total_tokens, 25);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 20);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 20; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Object.keys(lp.top_logprobs[i]).length <= 3, true);
    // Greedy: the chosen token is the most likely one.
    assert.equal(Math.max(...Object.values(lp.top_logprobs[i])), lp.token_logprobs[i]);
  }
  // The same prompt again: its full blocks come from the prefix cache.
  const again = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, temperature: 0,
  });
  assert.equal(again.choices[0].text, r.choices[0].text);
  assert.ok('cached_tokens' in again.usage.prompt_tokens_details);
});

test('streamed completion equals the whole one', async () => {
  const stream = await client.completions.create({
    prompt: 'Once upon a time', max_tokens: 20, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].text;
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(GREEDY.startsWith(text), text);
  assert.equal(text.length > 0, true);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

test('chat, whole and streamed, with top_logprobs', async () => {
  const messages = [{ role: 'system', content: 'You tell stories.' },
                    { role: 'user', content: 'Tell me about Lily.' }];
  const r = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 12, temperature: 0, logprobs: true,
    top_logprobs: 2,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 12);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0].delta;
    role = role ?? delta.role;
    text += delta.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(text, r.choices[0].message.content);
});

test('n choices, each with its own index', async () => {
  const r = await client.completions.create({
    prompt: 'Once upon a time', max_tokens: 8, temperature: 1, seed: 5, n: 3, ignore_eos: true,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 24);
});

test('seeded sampling reproduces; penalties are accepted', async () => {
  const ask = () => client.completions.create({
    prompt: 'Once upon a time', max_tokens: 16, temperature: 1, seed: 42,
    presence_penalty: 0.5, frequency_penalty: 0.5,
  });
  const [a, b] = [await ask(), await ask()];
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('a bad parameter is a 400 in OpenAI\'s error shape', async () => {
  await assert.rejects(
    client.completions.create({ prompt: 'Once upon a time', max_tokens: 4, top_p: 2 }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.error.param, 'top_p');
      assert.match(err.error.message, /top_p/);
      return true;
    });
});
