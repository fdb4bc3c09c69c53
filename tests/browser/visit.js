// Keeps the dashboard open in Debian's chromium (puppeteer-core) on each
// of a list of its pages in turn, for a number of seconds in all, as an
// operator would leave it; the page polls the node's API meanwhile. Prints
// one line of JSON: {requests: API requests the pages made, pages: [...],
// errors: [uncaught page errors]}. For tests that must prove what such
// polling does not do (tests/lua/untrusted-code.lua).
//
//   node tests/browser/visit.js SECONDS SCRATCH_DIR URL...
'use strict';

const path = require('path');
const puppeteer = require('puppeteer-core');

async function main() {
  const [secs, scratch, ...urls] = process.argv.slice(2);
  const total = Number(secs) * 1000;
  const browser = await puppeteer.launch({
    executablePath: process.env.BATON_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir: path.join(scratch, 'chromium-profile'),
    args: [
      ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : []),
      '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-default-apps',
    ],
  });
  const out = { requests: 0, pages: [], errors: [] };
  try {
    const page = await browser.newPage();
    page.on('request', (r) => { if (r.url().includes('/api/v1/')) out.requests++; });
    page.on('pageerror', (e) => out.errors.push(String(e)));
    const each = total / urls.length;
    for (const u of urls) {
      await page.goto(u, { waitUntil: 'domcontentloaded' });
      await new Promise((r) => setTimeout(r, each));
      out.pages.push({ url: u, title: await page.title() });
    }
  } finally {
    await browser.close().catch(() => {});
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => { process.stderr.write(`visit.js: ${e.stack || e}\n`); process.exit(1); });
