// The rows of the SDK matrix (tests/it/sdks.rs), on the Node side: each row
// makes one call the way an app would and prints what the app saw, as one
// JSON line: {row, seen} when the call returned, or {row, raised, text,
// body, trace} when it threw (the error's class, `e.message`, the body the
// SDK keeps, if any, and where it was thrown). `undefined` prints as null.

// probity, e.g. http://127.0.0.1:8080; each script appends its route prefix.
export const PROBITY = process.env.PROBE_URL;
// What the app asks in every chat: the fake upstream answers in kind.
export const MESSAGES = [{ role: 'user', content: 'Name the capital of France.' }];

// The body an SDK keeps on its error: `error` (openai, anthropic, ollama)
// or `body` (cohere-ai), as text.
function keptBody(err) {
  const body = err?.body ?? err?.error ?? null;
  return body === null || typeof body === 'string' ? body : JSON.stringify(body);
}

export async function row(name, call) {
  let out;
  try {
    out = { row: name, seen: await call() };
  } catch (err) {
    out = {
      row: name,
      raised: err?.constructor?.name ?? typeof err,
      text: String(err?.message ?? err),
      body: keptBody(err),
      trace: String(err?.stack ?? '').split('\n').slice(1, 3).map((line) => line.trim()),
    };
  }
  process.stdout.write(`${JSON.stringify(out, (_, value) => (value === undefined ? null : value))}\n`);
}
