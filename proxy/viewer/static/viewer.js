// tapeproxy's cassette viewer. The pages are whole without it; on a running server's page
// (body[data-poll]) it asks for the server's stamp every two seconds and, when an exchange
// has happened since, fetches the page again and puts its <main> in place. The new page is
// parsed by DOMParser, which runs no script, and the server escaped everything in it.
"use strict";
(function () {
  const poll = document.body.dataset.poll;
  if (!poll) {
    return;
  }
  let last = null;
  async function refresh() {
    try {
      const answer = await fetch(poll, { cache: "no-store" });
      const { stamp } = await answer.json();
      if (last !== null && stamp !== last) {
        const page = await fetch(window.location.href, { cache: "no-store" });
        const parsed = new DOMParser().parseFromString(await page.text(), "text/html");
        const fresh = parsed.getElementById("main");
        if (fresh) {
          document.getElementById("main").replaceWith(document.adoptNode(fresh));
        }
      }
      last = stamp;
    } catch (error) {
      // The server stopped or is restarting: try again at the next tick.
    }
    window.setTimeout(refresh, 2000);
  }
  refresh();
})();
