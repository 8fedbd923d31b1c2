// Tool calls on a model with a tool-calling chat template of its own: a
// tiny synthetic model (`tandem make-model`) carrying Qwen 2.5's template,
// served by `tandem up` and driven by the official `openai` Node package.
// The gateway must render the tools and tool messages with that template,
// pick the Hermes parser from its markers (--tool-call-parser auto), and
// read <tool_call> blocks out of the reply, streamed and whole. The random
// model is steered with a grammar (guided_grammar) to write such a block,
// as Qwen would.
//
//   node --test openai_tools_template_test.mjs   (TANDEM_BIN and TANDEM_SOURCE_DIR set)
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const bin = process.env.TANDEM_BIN;
const source = process.env.TANDEM_SOURCE_DIR;

let dir;
let up;
let client;

before(async () => {
  assert.ok(bin && source, 'TANDEM_BIN and TANDEM_SOURCE_DIR must be set');
  dir = mkdtempSync(join(tmpdir(), 'tandem-tools-'));
  const model = join(dir, 'qwen-tiny.gguf');
  execFileSync(bin, ['make-model', '--out', model, '--n-embd', '64', '--n-layer', '2',
    '--n-head', '4', '--n-head-kv', '2', '--n-ff', '128', '--chat-template-file',
    join(source, 'tests/engine/tokenizer/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja')]);
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
  if (up && up.exitCode === null) {
    const exited = new Promise((resolve) => up.once('exit', resolve));
    up.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather now in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

// What Qwen writes: some text, then one <tool_call> block per call.
const GRAMMAR = 'root ::= "Let me check.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
  + '\\"arguments\\": {\\"city\\": \\"Paris\\"}}\\n</tool_call>"';

test('a <tool_call> block in the reply becomes tool_calls, whole and streamed', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' },
                    { role: 'user', content: 'Weather in Paris?' }];
  const request = { messages, tools: TOOLS, max_tokens: 200, temperature: 0,
                    guided_grammar: GRAMMAR };
  const r = await client.chat.completions.create(request);
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'Let me check.\n');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.deepEqual(call.function, { name: 'get_weather', arguments: '{"city":"Paris"}' });

  const stream = await client.chat.completions.create({ ...request, stream: true });
  let content = '';
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    content += c.delta.content ?? '';
    finish = c.finish_reason ?? finish;
    for (const d of c.delta.tool_calls ?? []) {
      if (d.id) calls.push({ name: d.function.name, arguments: '' });
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
  }
  assert.equal(content, 'Let me check.\n');  // nothing of the markup leaks into content
  assert.deepEqual(calls, [call.function]);
  assert.equal(finish, 'tool_calls');

  // The conversation goes on through Qwen's template: the assistant's call
  // and the tool's result (<tool_response>) render, and the model answers.
  messages.push(choice.message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: '18C, sunny' });
  const answer = await client.chat.completions.create({
    messages, tools: TOOLS, max_tokens: 8, temperature: 0,
  });
  assert.equal(answer.choices[0].message.role, 'assistant');
  assert.ok(answer.usage.prompt_tokens > r.usage.prompt_tokens);
});

test('the template renders the tools into the prompt', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const plain = await client.chat.completions.create({ messages, max_tokens: 1 });
  const withTools = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 1 });
  // Qwen's template adds its <tools> system block: many more prompt tokens.
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 50,
            `${withTools.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
});
