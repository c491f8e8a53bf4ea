// fidelity.mjs BASE_URL SCENARIO... - streams each scripted conversation of
// the stand-in model server (tests/llm/standin.py) through the official
// `openai` client's streaming helper (chat.completions.stream: it assembles
// content and tool calls and throws on a stream it cannot parse), and
// prints one JSON line per scenario: {scenario, ok, content, tool_calls,
// finish_reason, usage} or {scenario, ok: false, status, error}.
import OpenAI from "openai";

const [baseURL, ...scenarios] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-fidelity", maxRetries: 0, timeout: 20000 });
const tools = ["bash", "read_file", "write_file"].map((name) => ({
  type: "function",
  function: { name, description: name, parameters: { type: "object", properties: {} } },
}));

for (const scenario of scenarios) {
  const out = { scenario };
  try {
    const stream = client.beta.chat.completions.stream({
      model: "standin",
      messages: [{ role: "user", content: `go [[${scenario}]]` }],
      tools,
      stream_options: { include_usage: true },
    });
    let deltas = "";
    stream.on("content", (d) => (deltas += d));
    const done = await stream.finalChatCompletion();
    const msg = done.choices[0].message;
    Object.assign(out, {
      ok: true,
      content: msg.content,
      deltas,
      tool_calls: (msg.tool_calls || []).map((c) => ({
        id: c.id,
        type: c.type,
        name: c.function.name,
        arguments: JSON.parse(c.function.arguments),
      })),
      finish_reason: done.choices[0].finish_reason,
      usage: done.usage,
    });
  } catch (e) {
    Object.assign(out, { ok: false, status: e.status ?? null, error: String(e.message || e) });
  }
  console.log(JSON.stringify(out));
}
