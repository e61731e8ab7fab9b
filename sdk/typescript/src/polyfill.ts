/** `await using` needs Symbol.asyncDispose; Node 18 and Node 20 before 20.4 lack it. */
const S = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
S.asyncDispose ??= Symbol.for("Symbol.asyncDispose");
S.dispose ??= Symbol.for("Symbol.dispose");
export {};
