import './base.css';
import './graph.css';
