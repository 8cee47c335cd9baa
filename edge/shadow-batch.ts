/**
 * A shadow batch (shadow.ts): the first queued decision's tenant's decisions as the JSON text the
 * shadow thread parses, bounded in count and in characters (the thread parses no longer text:
 * policy/runtime/candidate-thread.ts).
 */
import { withJsonMember } from './decision-inputs.ts';
import type { ShadowItem } from './shadow-thread.ts';

/** An item's JSON, its input written from the text the Check serialised when it carries one. */
function shadowItemJson(item: ShadowItem): string {
  if (item.inputJson === undefined) return JSON.stringify(item);
  const { inputJson, input: _input, ...rest } = item;
  return withJsonMember(rest, 'input', inputJson);
}

/** shadowItemJson, or undefined for an item that cannot be serialised (a cycle, a BigInt). */
function jsonOrUndefined(item: ShadowItem): string | undefined {
  try {
    return shadowItemJson(item);
  } catch {
    return undefined;
  }
}

export interface ShadowBatch {
  tenant: string;
  /** The JSON text of the batch's items (an array). */
  items: string;
  size: number;
}

/**
 * The first queued decision's tenant's decisions as one batch: up to `maxItems` of them and
 * `maxChars` of text, the rest of the queue kept in order. One that cannot be serialised, or
 * alone would pass `maxChars`, is dropped (counted); no batch when none is left to send.
 */
export function takeBatch(
  queue: readonly ShadowItem[],
  maxItems: number,
  maxChars: number,
): { batch: ShadowBatch | undefined; rest: ShadowItem[]; dropped: number } {
  const tenant = queue[0]?.t ?? '';
  const texts: string[] = [];
  const rest: ShadowItem[] = [];
  let chars = 2;
  let dropped = 0;
  let full = false;
  for (const item of queue) {
    if (item.t !== tenant || full) {
      rest.push(item);
      continue;
    }
    const text = jsonOrUndefined(item);
    if (text === undefined || text.length + 2 > maxChars) {
      dropped += 1;
      continue;
    }
    full = texts.length >= maxItems || chars + text.length + 1 > maxChars;
    if (full) rest.push(item);
    else {
      texts.push(text);
      chars += text.length + 1;
    }
  }
  const batch =
    texts.length === 0 ? undefined : { tenant, items: `[${texts.join(',')}]`, size: texts.length };
  return { batch, rest, dropped };
}
