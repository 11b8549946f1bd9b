// Drives the admin page in Debian's chromium, headless, for
// tests/it/admin_page.rs. Usage:
//   node admin_page.mjs <admin page URL> <proxy embeddings URL>
//        <normalized request id> <hostile request id> <screenshot path>
//        <admin token>
// Prints each check; exits non-zero on the first that fails.
import { chromium } from 'playwright-core';

const [pageUrl, proxyUrl, normalizedId, hostileId, shot, token] = process.argv.slice(2);
const HOSTILE = '<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>';
const WAIT = { timeout: 15000 };

function check(what, ok, detail) {
  if (!ok) {
    throw new Error(`FAILED ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

// The nulled figures a pane highlights: [pointer, text].
async function marks(page, pane) {
  return page.locator(`#${pane} mark.nulled`).evaluateAll((nodes) =>
    nodes.map((n) => [n.dataset.pointer, n.textContent]));
}

async function open(page, requestId) {
  await page.locator(`#captures tbody tr[data-request-id="${requestId}"]`).click();
  await page.waitForFunction((id) => {
    const shown = document.getElementById('detail-id');
    return shown && shown.textContent === id && !document.getElementById('detail').hidden;
  }, requestId, WAIT);
}

// Both panes in view and each highlighted figure scrolled into its pane.
async function visible(page, pane) {
  return page.locator(`#${pane} mark.nulled`).first().evaluate((mark) => {
    const box = mark.getBoundingClientRect();
    const frame = mark.closest('pre').getBoundingClientRect();
    return box.top >= frame.top && box.bottom <= frame.bottom && box.width > 0;
  });
}

async function run(page) {
  const problems = [];
  page.on('pageerror', (err) => problems.push(err.message));
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(msg.text()); });
  await page.goto(pageUrl);

  // Without the admin token the page shows no data and asks for it; a
  // wrong one is refused and asked again; the right one opens the page.
  await page.locator('#login').waitFor(WAIT);
  check('no route or capture is shown without the token',
    await page.locator('#routes tbody tr').count() === 0
      && await page.locator('#captures tbody tr').count() === 0);
  await page.locator('#token').fill('not-the-admin-token-0000');
  await page.locator('#login button').click();
  await page.waitForFunction(() => !document.getElementById('login').hidden
    && document.getElementById('login-note').textContent.includes('not the value of'), null, WAIT);
  check('a wrong token is refused, and asked again', true);
  await page.locator('#token').fill(token);
  await page.locator('#login button').click();
  // A 401 answer is a console error in Chromium: the checks below count
  // only what comes after the token was given.
  problems.length = 0;
  const route = page.locator('#routes tbody tr[data-route="openai"]');
  await route.waitFor(WAIT);
  const cells = await route.locator('td').allTextContents();
  check('the route table shows the route, where it goes and its requests',
    /^openai\/openai → http:\/\/127\.0\.0\.1:\d+ \(openai\)$/.test(cells[0]) && cells[1] === '4', cells);
  check('its error rate and normalized count', cells[7] === '25.0%' && cells[8] === '2', cells);
  const idle = await page.locator('#routes tbody tr[data-route="idle"] td').allTextContents();
  check('a configured route that served nothing is listed', idle[0].startsWith('idle/idle → ') && idle[1] === '0', idle);

  const row = page.locator(`#captures tbody tr[data-request-id="${normalizedId}"]`);
  await row.waitFor(WAIT);
  const rowCells = await row.locator('td').allTextContents();
  check('the normalized capture is listed with its pointer',
    rowCells[2] === 'normalized' && rowCells[3] === '/usage/prompt_tokens', rowCells);

  // A body with markup: shown as text in both panes, nothing runs.
  await open(page, hostileId);
  const left = await page.locator('#left').textContent();
  const right = await page.locator('#right').textContent();
  check('the hostile body is shown as text on both sides', left.includes(HOSTILE) && right.includes(HOSTILE));
  check('its script never ran', await page.evaluate(() => window.__pwned) === undefined);
  check('no element was injected', await page.locator('img').count() === 0
    && await page.locator('script').count() === 1);

  // The page refreshes itself: traffic sent now shows without a reload.
  const sent = await fetch(proxyUrl, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-fake': 'valid' },
    body: '{"model": "m", "input": ["a", "b"]}',
  });
  check('one more request through the proxy', sent.status === 200, sent.status);
  await page.waitForFunction(() => {
    const row = document.querySelector('#routes tbody tr[data-route="openai"]');
    return row && row.cells[1].textContent === '5';
  }, null, WAIT);
  check('the page refreshed itself', true);
  check('still nothing ran after the refresh', await page.evaluate(() => window.__pwned) === undefined);

  // The normalized capture side by side, its figure highlighted in both.
  await open(page, normalizedId);
  await page.locator('#right mark.nulled').first().waitFor(WAIT);
  const verbatim = await marks(page, 'left');
  const delivered = await marks(page, 'right');
  check('the verbatim pane highlights the malformed value',
    JSON.stringify(verbatim) === JSON.stringify([['/usage/prompt_tokens', '"4"']]), verbatim);
  check('the delivered pane highlights its null',
    JSON.stringify(delivered) === JSON.stringify([['/usage/prompt_tokens', 'null']]), delivered);
  check('both highlights are in view', await visible(page, 'left') && await visible(page, 'right'));
  check('the panes sit side by side', await page.evaluate(() => {
    const l = document.getElementById('left').getBoundingClientRect();
    const r = document.getElementById('right').getBoundingClientRect();
    return r.left >= l.right && Math.abs(r.top - l.top) < 2;
  }));
  check('no script error, no CSP violation', problems.length === 0, problems);

  await page.locator('#left mark.nulled').first().hover();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  // A fresh context: no profile, cache or storage from any other run.
  const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
  await run(await context.newPage());
  console.log('all checks passed');
} catch (err) {
  console.error(err && err.stack ? err.stack : String(err));
  process.exitCode = 1;
} finally {
  await browser.close();
}
