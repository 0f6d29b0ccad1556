"""Read a bash launch script without running it: the words its commands get, with the variables
the script itself sets expanded (the Megatron-LM and torchtitan readers,
parplan_gen/backends/<name>/reader.py, read their arguments from them).

Understood, as bash does it, in the script's order (every branch of an `if` is taken):
- `case WORD in PATTERN) ... ;; esac`: where WORD's value is the script's own (no variable it
  does not set, none whose value came from the environment's default, `${X:-d}` or `${X:=d}` of
  an unset X, none assigned inside an `if` or an undecided case) and its patterns are plain text
  with `*` and `?` (quoted text matching itself), only the branch bash takes is read, its
  assignments included. Every branch is read from the first pattern that is not so (a bracket
  expression, an escape, an expansion) and after a `;&` or `;;&`, and in a case whose word is
  not the script's own;
- assignments `NAME=value`, `NAME+=value`, arrays `NAME=(...)` and `NAME+=(...)`, also after
  `export`, `declare`, `local`, `readonly`, `typeset` and before a command;
- expansions `$NAME`, `${NAME}`, `${NAME[@]}`, `${NAME[*]}` and `${NAME:-word}` (`-`, `:=`,
  `=`, `:+`, `+` too); positional parameters are unset (`${1:-x}` is x, `"$@"` is nothing).
  Unquoted, an expansion is split into words at blanks; quoted, it is not;
- quotes, backslashes, `#` comments, line continuations; `;`, `&`, `|`, parentheses and line
  ends separate commands.
Nothing is executed and the environment is not read: a variable the script does not set (and
that has no default), `$(...)`, `$((...))`, backquotes and other `${...}` forms stay as written.

In linear time: the text is scanned once (inputs/shell_parse.py: regular-expression runs, one
step per quote, escape or expansion), arrays and `+=` grow in place, and the characters that
expanding variables produces are capped (MAX_EXPANDED_CHARS), so that variables which double
themselves cannot blow up.
Errors are ValueError(message, offset in the text).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.shell_parse import Exp, Lit, Parser, Word

# A launch script larger than this is refused before it is split (check --from-megatron,
# --from-torchtitan): Megatron-LM's example launch scripts are a few KB
# (examples/gpt3/train_gpt3_175b_distributed.sh), and splitting takes up to ~1 s per MiB in the
# worst case (one word per two characters).
MAX_ARGUMENT_SCRIPT_BYTES = 256 * 1024
# Megatron-LM's example scripts expand to a few KB (examples/llama/train_llama3_8b_h100_fp8.sh);
# this is four times the largest script the readers accept.
MAX_EXPANDED_CHARS = 1024 * 1024

Seg = tuple[str, int]  # text and the line it comes from
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_FIELD = re.compile(r"[^ \t\n]+")
_SKIPPED = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"}
_DECLARATIONS = {"export", "declare", "local", "readonly", "typeset"}


def unexpanded_hint(raw: str) -> str:
    """Why a value read from a script may hold what bash would have replaced (for an error that
    quotes it): shell arithmetic, a command substitution, or a variable the script does not set;
    "" where it holds no `$` or backquote."""
    if "$((" in raw:
        return " (shell arithmetic, which parplan does not evaluate)"
    if "$(" in raw or "`" in raw:
        return " (a command's output, which parplan does not run)"
    if "$" in raw:
        return " (a variable the script does not set; the environment is not read)"
    return ""


@dataclass
class _Var:
    elements: list[list[Seg]] = field(default_factory=list)  # a scalar is one element
    unknown: bool = False  # its value came from the environment (a default of an unset name)


# A case is decided only on a subject and patterns this short (longer ones read every branch):
# each pattern is matched against the subject once, so the work stays within their product.
MAX_CASE_SUBJECT_CHARS = 4096
MAX_CASE_PATTERN_CHARS = 256
# Pattern text decided here: literal characters with `*` and `?` (bash's and fnmatch's agree on
# them); a bracket expression, an escape or an expansion in a pattern leaves the case undecided.
_SIMPLE_PATTERN = re.compile(r"[^\[\]\\$`]*")


@dataclass
class _Case:
    """One `case ... esac` being read: whether the script around it is read (`outer`), the
    value of its word where the script's own values give it and its patterns can be matched
    here (None: every branch from here is read), where the reading is (`state`: subject, in,
    pattern, body), whether a pattern of the branch being read matched, whether a branch was
    taken, and whether the branch now is read (`active`)."""

    outer: bool
    subject: str | None = None
    state: str = "subject"
    matched: bool = False
    taken: bool = False
    active: bool = False


class _Fields:
    """The words an expansion gives: with `split`, unquoted text is split at blanks; without,
    everything joins into one value (an assignment's)."""

    def __init__(self, split: bool) -> None:
        self.split = split
        self.fields: list[list[Seg]] = []
        self.current: list[Seg] | None = None

    def add(self, text: str, line: int, quoted: bool) -> None:
        if quoted or not self.split:
            self._append(text, line)
            return
        at, found = 0, False
        for m in _FIELD.finditer(text):
            line += text.count("\n", at, m.start())
            if m.start() > 0:
                self.close()
            self._append(m.group(), line)
            at, found = m.start(), True
        if text and (not found or text[-1] in " \t\n"):
            self.close()

    def next_element(self, line: int) -> None:
        """Between two elements of a quoted "${A[@]}": a new word (one value: a blank)."""
        if self.split:
            self.close()
        else:
            self._append(" ", line)

    def _append(self, text: str, line: int) -> None:
        if self.current is None:
            self.current = []
        self.current.append((text, line))

    def close(self) -> None:
        if self.current is not None:
            self.fields.append(self.current)
            self.current = None

    def done(self) -> list[list[Seg]]:
        self.close()
        return self.fields


def script_words(text: str) -> list[Seg]:
    """The words the script's commands get, in order, each with the line it comes from (for an
    expanded word, the line of the value it was taken from)."""
    return _Script(text).run()


def read_script_words(text: str, path: str) -> list[Seg]:
    """`script_words` of the file `path` holds, or an InputError naming its line."""
    try:
        return script_words(text)
    except ValueError as exc:
        message, offset = exc.args
        line = text.count("\n", 0, offset) + 1
        hint = (
            " (is a quote unbalanced?)"
            if message.startswith("No ")
            else " (a variable that doubles itself?)"
            if message.startswith("expanding")
            else ""
        )
        where = SourceRef(path, line)
        raise InputError(f"cannot split into shell words: {message}{hint}", where) from None


class _Script:
    def __init__(self, text: str) -> None:
        self.parser = Parser(text)
        self.vars: dict[str, _Var] = {}
        self.expanded = 0  # characters produced by expanding variables so far
        self.words: list[Seg] = []
        self.cases: list[_Case] = []  # the `case`s being read, innermost last
        self.unknown_reads = 0  # expansions of a name the script did not set itself
        self.if_depth = 0  # `if`s open (each read in every branch)
        self.undecided_cases = 0  # cases open that are read in every branch

    @property
    def active(self) -> bool:
        """Whether the commands now read are in a branch bash would (or might) take."""
        if not self.cases:
            return True
        case = self.cases[-1]
        return case.active if case.state == "body" else case.outer

    @property
    def unsure(self) -> bool:
        """Whether an assignment now might not be bash's: inside an `if` (every branch is read)
        or a case read in every branch."""
        return self.if_depth > 0 or self.undecided_cases > 0

    def run(self) -> list[Seg]:
        tokens = self.parser.tokens()
        i, statement = 0, _Statement(self)
        while i < len(tokens):
            token = tokens[i]
            i += 1
            case = self.cases[-1] if self.cases else None
            if isinstance(token, Word):
                at_start = not statement.command and not statement.declaring
                keyword = _keyword(token) if at_start else ""
                if case is not None and case.state in ("subject", "in"):
                    self._case_word(case, token)
                elif keyword == "esac" and case is not None:
                    self._end_case(self.cases.pop())
                elif case is not None and case.state == "pattern":
                    self._case_word(case, token)
                elif keyword == "case":
                    self.cases.append(_Case(outer=self.active))
                else:
                    statement.word(token, tokens, i)
                    i = statement.resume_at or i
                    statement.resume_at = None
                continue
            if case is not None and case.state == "pattern" and token[0] == ")":
                case.state, case.active = (
                    "body",
                    case.outer and (case.subject is None or (case.matched and not case.taken)),
                )
                case.taken = case.taken or case.matched
            elif case is not None and case.state == "body":
                ends = _branch_end(tokens, i, token)
                if ends:
                    if ends != ";;":  # ;& and ;;& run on into what follows: every branch
                        self._undecide(case)
                    case.state, case.matched, case.active = "pattern", False, False
                    i += len(ends) - 1
            statement = _Statement(self)  # an operator ends the command
        return self.words

    def _undecide(self, case: _Case) -> None:
        """Read every branch of `case` from here on."""
        if case.subject is not None:
            case.subject = None
            self.undecided_cases += 1

    def _end_case(self, case: _Case) -> None:
        if case.subject is None and case.state != "subject":
            self.undecided_cases -= 1

    def _case_word(self, case: _Case, word: Word) -> None:
        """A word of a `case` that is not a command: its subject, `in`, or a pattern."""
        if case.state == "subject":
            fields, unknown = self.expand_known(word.parts, split=False)
            text = "".join(t for field_ in fields for t, _ in field_)
            known = (
                not unknown
                and not self.unsure
                and _SIMPLE_PATTERN.fullmatch(text) is not None
                and len(text) <= MAX_CASE_SUBJECT_CHARS
            )
            case.subject, case.state = (text if known else None), "in"
            if not known:
                self.undecided_cases += 1
        elif case.state == "in":
            case.state = "pattern"
        elif case.subject is not None and not case.taken:
            raw = self.parser.text[word.start : word.end]
            if len(raw) > MAX_CASE_PATTERN_CHARS or _SIMPLE_PATTERN.fullmatch(raw) is None:
                self._undecide(case)  # not matched here: this branch and the later ones read
                return
            pattern = "".join(
                re.sub(r"([*?])", r"[\1]", p.text) if p.quoted else p.text
                for p in word.parts
                if isinstance(p, Lit)
            )
            glob = "*" in pattern or "?" in pattern  # else plain text: equal or not
            found = fnmatch.fnmatchcase(case.subject, pattern) if glob else case.subject == pattern
            case.matched = case.matched or found

    # ---- expansion -----------------------------------------------------------------------------

    def expand_known(
        self, parts: list[Lit | Exp] | tuple[Lit | Exp, ...], *, split: bool
    ) -> tuple[list[list[Seg]], bool]:
        """The fields `parts` expand to, and whether that read a name the script did not set
        itself (one from the environment)."""
        before = self.unknown_reads
        out = _Fields(split)
        self.expand(parts, out)
        return out.done(), self.unknown_reads != before

    def expand(self, parts: list[Lit | Exp] | tuple[Lit | Exp, ...], out: _Fields) -> None:
        for part in parts:
            if isinstance(part, Lit):
                out.add(part.text, part.line, part.quoted)
            else:
                self._expand(part, out)

    def _expand(self, exp: Exp, out: _Fields) -> None:
        if exp.name == "@":
            return
        var = self.vars.get(exp.name)
        if var is None or var.unknown:
            self.unknown_reads += 1
        elements = [] if var is None else var.elements if exp.index else var.elements[:1]
        if var is not None:
            self.expanded += sum(len(text) + 1 for element in elements for text, _ in element)
            if self.expanded > MAX_EXPANDED_CHARS:
                raise ValueError(
                    f"expanding variables gives more than {MAX_EXPANDED_CHARS:,} characters",
                    exp.offset,
                )
        null = not any(text for element in elements for text, _ in element)
        unset = var is None or (exp.op is not None and exp.op.startswith(":") and null)
        if exp.op is not None and exp.op.endswith("+"):
            if not unset:
                self.expand(exp.word, out)
            return
        if exp.op is not None and unset:
            if exp.op.endswith("=") and self.active:  # a default bash assigns, from here on
                value = _Fields(split=False)
                self.expand(exp.word, value)
                self.vars[exp.name] = _Var(value.done() or [[]], unknown=True)
            self.expand(exp.word, out)
            return
        if var is None:
            out.add(exp.source, exp.line, True)  # not set by the script: as written
            return
        for n, element in enumerate(elements):
            if n and exp.quoted and exp.index == "@":
                out.next_element(exp.line)
            elif n:
                out.add(" ", exp.line, exp.quoted)
            if not element and exp.quoted:
                out.add("", exp.line, True)
            for text, line in element:
                out.add(text, line, exp.quoted)

    def assign(
        self,
        name: str,
        append: bool,
        elements: list[list[Seg]],
        array: bool,
        unknown: bool = False,
    ) -> None:
        """Set (or with `append`, extend) `name`; `unknown`: its value came from the
        environment (an expansion of a name the script did not set)."""
        if not self.active:
            return  # a branch bash does not take
        unknown = unknown or self.unsure
        var = self.vars.get(name)
        if var is not None and unknown:
            var.unknown = True
        if var is None or not append:
            self.vars[name] = _Var(elements, unknown)
        elif array or not var.elements:
            var.elements.extend(elements)
        else:
            var.elements[0].extend(elements[0])


class _Statement:
    """One simple command: assignments and declarations first, then the command's words."""

    def __init__(self, script: _Script) -> None:
        self.script = script
        self.command = False  # a command word was seen: the rest are its arguments
        self.declaring = False  # after export/declare/...: words are names or assignments
        self.resume_at: int | None = None

    def word(self, word: Word, tokens: list[Word | tuple[str, int]], after: int) -> None:
        script = self.script
        first = word.parts[0] if word.parts else None
        if not self.command:
            head = first.text if isinstance(first, Lit) and not first.quoted else ""
            m = _ASSIGNMENT.match(head)
            if m:
                self._assignment(word, m, tokens, after)
                return
            if self.declaring or (len(word.parts) == 1 and head in _SKIPPED):
                if not self.declaring and head in ("if", "fi"):  # `if`s open: read both ways
                    script.if_depth = max(0, script.if_depth + (1 if head == "if" else -1))
                return
            if len(word.parts) == 1 and head in _DECLARATIONS:
                self.declaring = True
                return
            self.command = True
        if not script.active:
            return  # a branch of a `case` bash does not take
        if len(word.parts) == 1 and isinstance(first, Lit) and not first.quoted:
            script.words.append((first.text, first.line))  # plain text: no blank in it
            return
        fields = _Fields(split=True)
        script.expand(word.parts, fields)
        script.words.extend(("".join(t for t, _ in f), f[0][1]) for f in fields.done())

    def _assignment(
        self, word: Word, m: re.Match[str], tokens: list[Word | tuple[str, int]], after: int
    ) -> None:
        script, first = self.script, word.parts[0]
        assert isinstance(first, Lit)
        rest = first.text[m.end() :]
        parts = ([Lit(rest, first.line, True)] if rest else []) + word.parts[1:]
        nxt = tokens[after] if after < len(tokens) else None
        if not parts and isinstance(nxt, tuple) and nxt == ("(", word.end):  # NAME=( ... )
            elements: list[list[Seg]] = []
            unknown, i = False, after + 1
            while i < len(tokens) and not _is_op(tokens[i], ")"):
                token = tokens[i]
                if isinstance(token, Word):
                    fields, from_env = script.expand_known(token.parts, split=True)
                    elements.extend(fields)
                    unknown = unknown or from_env
                i += 1
            if i == len(tokens):
                raise ValueError(f"No closing parenthesis for {m.group()}(", word.start)
            script.assign(m.group(1), bool(m.group(2)), elements, True, unknown)
            self.resume_at = i + 1
            return
        fields, unknown = script.expand_known(parts, split=False)
        script.assign(m.group(1), bool(m.group(2)), fields or [[]], False, unknown)


def _keyword(word: Word) -> str:
    """The word's text where it is one unquoted literal (a reserved word can only be that)."""
    first = word.parts[0] if len(word.parts) == 1 else None
    return first.text if isinstance(first, Lit) and not first.quoted else ""


def _branch_end(tokens: list[Word | tuple[str, int]], at: int, op: tuple[str, int]) -> str:
    """The terminator of a case branch that the operator `op` (tokens[at - 1]) starts: `;;`,
    `;&` or `;;&`, its operators adjacent in the text; "" where it starts none."""
    if op[0] != ";":
        return ""
    ops = ";"
    while len(ops) < 3 and at < len(tokens):
        nxt = tokens[at]
        if not isinstance(nxt, tuple) or nxt[1] != op[1] + len(ops) or nxt[0] not in ";&":
            break
        ops += nxt[0]
        at += 1
        if nxt[0] == "&":
            break
    return ops if ops in (";;", ";&", ";;&") else ""


def _is_op(token: Word | tuple[str, int], op: str) -> bool:
    """Whether `token` is the operator `op` (a Word is no operator)."""
    return isinstance(token, tuple) and token[0] == op
