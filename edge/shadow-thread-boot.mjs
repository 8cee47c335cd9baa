// Worker entry for the shadow evaluation thread: loader hooks are per thread, so this thread
// registers tsx's loader before it loads the TypeScript module (edge/shadow-thread.ts).
import { register } from 'tsx/esm/api';

register();
await import('./shadow-thread.ts');
