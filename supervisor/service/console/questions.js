// The way straight to a run's open question, however many frames come before it: a link
// under the run's heading while one is open, and the focus moved to a question that comes
// while the person has not chosen another place on the page (the run's heading, where the
// page put it, or nowhere). Elsewhere (typing a search, reading the frames, the output) the
// focus stays, and the live region says where the way is: a person is never taken from
// what they are doing, and never has to Tab through a thousand frames to answer.

import { announce, el } from "./dom.js";

export class QuestionLink {
  /** `title`: the run's heading, where the focus returns if the link goes with it. */
  constructor(title) {
    this.title = title;
    this.open = new Map(); // askId → {line, href}: the question's line takes the focus
    this.arrived = false;
    this.root = el(
      "a",
      {
        class: "to-question",
        href: "#",
        hidden: true,
        onclick: (event) => {
          event.preventDefault();
          this.go();
        },
      },
      "Go to the open question",
    );
  }

  /** A question drawn and open: its line (focusable) and its frame's address. */
  asked(askId, line, href) {
    this.open.set(askId, { line, href });
    this.arrived = true;
    this.show();
  }

  /** A question settled, closed, or past its deadline: the way to it goes. */
  gone(askId) {
    if (this.open.delete(askId)) this.show();
  }

  show() {
    const first = this.open.values().next().value;
    if (!first && this.root === document.activeElement) this.title.focus();
    this.root.hidden = !first;
    if (first) this.root.setAttribute("href", first.href);
  }

  go() {
    const first = this.open.values().next().value;
    if (first) first.line.focus();
  }

  /** After a batch of frames is drawn: a question that came in it and is still open takes
   * the focus if the person has not chosen another place; else the live region says the
   * way to it. */
  drawn() {
    if (!this.arrived) return;
    this.arrived = false;
    if (!this.open.size) return;
    const at = document.activeElement;
    if (!at || at === document.body || at === this.title || at.id === "main") this.go();
    else announce(`${this.root.textContent}: the link under the run's heading`, true);
  }
}
