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

// Structured output and tools. stories260K has no chat template, so the
// gateway describes the tools in a system message and reads JSON calls
// (docs/api.md); the forced tool_choice constrains even this tiny random
// model to a valid call, which is what these tests rely on.
const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather now in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } },
      required: ['city'],
      additionalProperties: false,
    },
  },
}, {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
  },
}];

function checkWeatherCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args), ['city']);
  assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
}

test('response_format json_schema gives JSON of the schema', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Pick a color.' }], max_tokens: 48, temperature: 1, seed: 3,
    response_format: {
      type: 'json_schema',
      json_schema: {
        name: 'pick', strict: true,
        schema: {
          type: 'object',
          properties: { color: { type: 'string', enum: ['red', 'green'] }, n: { type: 'integer' } },
          required: ['color'], additionalProperties: false,
        },
      },
    },
  });
  const parsed = JSON.parse(r.choices[0].message.content);
  assert.ok(['red', 'green'].includes(parsed.color), r.choices[0].message.content);
  const bad = client.chat.completions.create({
    messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_schema' },
  });
  await assert.rejects(bad, (err) => {
    assert.equal(err.status, 400);
    assert.match(err.error.message, /^response_format\.json_schema/);
    return true;
  });
});

test('tool flow, whole: tools -> tool_calls -> tool result -> answer', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r = await client.chat.completions.create({
    model: 'stories260K', messages, tools: TOOLS, max_tokens: 64, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.role, 'assistant');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  checkWeatherCall(call);
  messages.push(choice.message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: '{"temperature_c": 18}' });
  const answer = await client.chat.completions.create({
    model: 'stories260K', messages, tools: TOOLS, max_tokens: 12, temperature: 0,
  });
  const reply = answer.choices[0];
  assert.equal(reply.message.role, 'assistant');
  assert.equal(typeof reply.message.content, 'string');
  assert.ok(reply.message.content.length > 0);
  assert.ok(['stop', 'length'].includes(reply.finish_reason), reply.finish_reason);
});

test('tool flow, streamed: deltas accumulate into the same calls', async () => {
  const messages = [{ role: 'user', content: 'Weather in Oslo, and the time?' }];
  const request = {
    model: 'stories260K', messages, tools: TOOLS, tool_choice: 'required', max_tokens: 96,
    temperature: 1, seed: 11, parallel_tool_calls: false,
  };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.equal(whole.choices[0].message.tool_calls.length, 1);  // parallel_tool_calls: false

  // By hand: index, id, type and name first, then argument pieces.
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const calls = [];
  let finish = null;
  let content = '';
  let argumentPieces = 0;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    finish = c.finish_reason ?? finish;
    content += c.delta.content ?? '';
    for (const d of c.delta.tool_calls ?? []) {
      if (d.id) {
        assert.equal(d.index, calls.length);
        assert.equal(d.type, 'function');
        calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } });
      }
      if (d.function?.arguments) argumentPieces += 1;
      calls[d.index].function.arguments += d.function?.arguments ?? '';
    }
  }
  assert.equal(finish, 'tool_calls');
  // The arguments come as deltas. How many depends on timing: tokens that
  // arrive while a write is in flight go out together, so a fast worker can
  // deliver the whole call in one message. That each message's arguments go
  // out as they arrive is checked without timing in openai_tools_test.cc
  // (StreamedContentThenCallDeltasThenToolCallsFinish).
  assert.ok(argumentPieces >= 1, `${argumentPieces} argument pieces`);
  assert.equal(content, '');
  // Seeded: the same call as the whole response (ids are per response).
  assert.equal(calls.length, 1);
  assert.match(calls[0].id, /^call_[A-Za-z0-9]{24}$/);
  assert.deepEqual(calls.map((c) => c.function),
                   whole.choices[0].message.tool_calls.map((c) => c.function));

  // The SDK's own accumulator agrees.
  const helper = client.beta.chat.completions.stream(request);
  const final = await helper.finalChatCompletion();
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function),
                   calls.map((c) => c.function));

  // The call's result goes back, streamed, and the model answers in text.
  messages.push({ role: 'assistant', content: null, tool_calls: calls });
  for (const call of calls) {
    messages.push({ role: 'tool', tool_call_id: call.id, content: 'sunny, 12:00' });
  }
  const answer = await client.chat.completions.create({
    model: 'stories260K', messages, tools: TOOLS, max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '';
  let answerFinish = null;
  for await (const chunk of answer) {
    text += chunk.choices[0].delta.content ?? '';
    answerFinish = chunk.choices[0].finish_reason ?? answerFinish;
  }
  assert.ok(text.length > 0);
  assert.ok(['stop', 'length'].includes(answerFinish), answerFinish);
});

test('tool_choice auto: a reply that is a call comes back as tool_calls', async () => {
  // The model decides; here a schema makes its reply a call in the generic
  // JSON form that a model without a template of its own is asked for.
  const call = {
    type: 'object',
    properties: {
      name: { const: 'get_weather' },
      arguments: {
        type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'],
        additionalProperties: false,
      },
    },
    required: ['name', 'arguments'], additionalProperties: false,
  };
  const request = {
    messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: TOOLS, tool_choice: 'auto',
    max_tokens: 64, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'call', schema: call } },
  };
  const r = await client.chat.completions.create(request);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.content, null);
  checkWeatherCall(r.choices[0].message.tool_calls[0]);
  const final = await client.beta.chat.completions.stream(request).finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function),
                   r.choices[0].message.tool_calls.map((c) => c.function));
  // tool_choice none: the same reply is content.
  const none = await client.chat.completions.create({ ...request, tool_choice: 'none' });
  assert.equal(none.choices[0].finish_reason, 'stop');
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.deepEqual(JSON.parse(none.choices[0].message.content).name, 'get_weather');
});

test('tool_choice naming an unknown function is a 400 naming the field', async () => {
  await assert.rejects(
    client.chat.completions.create({
      messages: [{ role: 'user', content: 'x' }], tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.error.param, 'tool_choice.function.name');
      return true;
    });
});
